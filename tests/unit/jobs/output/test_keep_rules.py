"""Keep rules (qtts results --min-dnsmos ...): which ok rows pass, and the saved file."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from qtts.core.errors import UsageError
from qtts.core.jobs.output.keep_rules import KeepRules, read_keep_rules, write_keep_rules
from qtts.core.jobs.state.paths import StatePaths

TABLE = pa.table(
    {
        "dnsmos_ovrl": [3.5, 2.9, None, 3.0],
        "cer": [0.0, 0.05, 0.2, 0.1],
        "chars_per_s": [12.0, 30.0, 14.0, 4.0],
        "hit_frame_budget": [False, False, True, None],
    }
)


def test_floor_and_ceiling_are_inclusive_and_a_null_fails():
    rules = KeepRules({"min-dnsmos": 3.0, "max-cer": 0.1})
    assert rules.passes(TABLE).tolist() == [True, False, False, True]


def test_chars_per_s_band_and_budget_hits():
    band = KeepRules({"min-chars-per-s": 5.0, "max-chars-per-s": 25.0})
    assert band.passes(TABLE).tolist() == [True, False, True, False]
    # an unknown hit_frame_budget (null) is not known to be clean: left out
    assert KeepRules(no_budget_hits=True).passes(TABLE).tolist() == [True, True, False, False]


def test_a_rule_on_a_column_not_there_keeps_nothing():
    rules = KeepRules({"max-wer": 0.5})
    assert not rules.passes(TABLE).any()
    assert rules.columns() == {"wer"}


def test_no_rules_keep_everything_and_describe_reads_as_options():
    assert KeepRules().empty and KeepRules().passes(TABLE).all()
    rules = KeepRules({"min-dnsmos": 3.0, "max-cer": 0.1}, no_budget_hits=True)
    assert rules.describe() == "--max-cer 0.1 --min-dnsmos 3 --no-budget-hits"


def test_bad_rules_are_usage_errors():
    with pytest.raises(UsageError, match="unknown keep rule"):
        KeepRules({"min-snr": 3.0})
    with pytest.raises(UsageError, match="finite"):
        KeepRules({"max-cer": float("nan")})


def test_saved_rules_round_trip_and_empty_rules_remove_the_file(tmp_path):
    StatePaths(tmp_path).dir.mkdir()
    assert read_keep_rules(tmp_path).empty  # no file: no rules
    rules = KeepRules({"min-dnsmos": 3.25}, no_budget_hits=True)
    write_keep_rules(tmp_path, rules)
    assert read_keep_rules(tmp_path) == rules
    write_keep_rules(tmp_path, KeepRules())
    assert not StatePaths(tmp_path).keep_file.exists()


def test_a_damaged_rules_file_is_one_usage_error(tmp_path):
    StatePaths(tmp_path).dir.mkdir()
    StatePaths(tmp_path).keep_file.write_text("{not json")
    with pytest.raises(UsageError, match="keep.json"):
        read_keep_rules(tmp_path)


def test_passes_is_columnar_at_a_million_rows():
    n = 1_000_000
    table = pa.table({"dnsmos_ovrl": np.linspace(1, 5, n)})
    kept = KeepRules({"min-dnsmos": 3.0}).passes(table)
    assert kept.dtype == bool and kept.sum() == n // 2


def test_max_wer_leaves_rows_without_a_wer_but_with_a_cer_to_max_cer():
    # Chinese and Japanese rows are scored with a CER and no WER
    table = pa.table({"wer": [0.05, 0.5, None, None], "cer": [0.01, 0.2, 0.02, None]})
    assert KeepRules({"max-wer": 0.1}).passes(table).tolist() == [True, False, True, False]
