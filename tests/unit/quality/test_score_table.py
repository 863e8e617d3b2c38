"""scores.parquet's resume rule: old scores are kept while a file's stamp holds, dropped when its
audio changed, and a scorer skips only the rows it scored with the same identity."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from qtts.core.quality.scores import current, needs, scatter


def _rows(stamps: dict[str, str | None]) -> pa.Table:
    return pa.table({"file_name": list(stamps), "stamp": pa.array(list(stamps.values()),
                                                                  pa.string())})  # fmt: skip


def _old() -> pa.Table:
    return pa.table({"file_name": ["a", "b", "gone"], "stamp": ["1", "2", "3"],
                     "dnsmos_ovrl": [3.0, 2.0, 1.0], "dnsmos_scorer": ["d1", "d1", "d1"],
                     "asr_text": ["hi", None, None], "asr_scorer": ["m1", None, None],
                     "error": [None, "asr: boom", None]})  # fmt: skip


def test_scores_stay_while_the_stamp_holds_and_go_when_the_audio_changed():
    table = current(_rows({"a": "1", "b": "changed", "new": "9"}), _old(), "file_name")
    assert table["file_name"].to_pylist() == ["a", "b", "new"]  # "gone" left the dataset
    assert table["dnsmos_ovrl"].to_pylist() == [3.0, None, None]
    assert table["asr_text"].to_pylist() == ["hi", None, None]
    assert table["error"].to_pylist() == [None, None, None]
    assert table["cer"].null_count == 3  # columns the old file lacked are there, null


def test_a_scorer_redoes_what_another_identity_made_or_what_has_no_value():
    table = current(_rows({"a": "1", "b": "2", "new": "9"}), _old(), "file_name")
    assert needs(table, "dnsmos", "d1", "dnsmos_ovrl").tolist() == [False, False, True]
    assert needs(table, "dnsmos", "d2", "dnsmos_ovrl").tolist() == [True, True, True]
    assert needs(table, "asr", "m1", "asr_text").tolist() == [False, True, True]


def test_a_missing_file_has_no_stamp_and_nothing_carried():
    table = current(_rows({"a": None}), _old(), "file_name")
    assert table["dnsmos_ovrl"].to_pylist() == [None]


def test_scatter_writes_each_column_at_its_rows():
    table = current(_rows({"a": "1", "b": "2", "c": "3"}), None, "file_name")
    out = scatter(table, {"dnsmos_ovrl": ([2, 0], [4.5, 1.5]), "error": ([1], ["bad"]),
                          "asr_text": ([], [])})  # fmt: skip
    assert out["dnsmos_ovrl"].to_pylist() == [1.5, None, 4.5]
    assert out["error"].to_pylist() == [None, "bad", None]
    assert out.schema == table.schema
    assert np.array_equal(needs(out, "dnsmos", "x", "dnsmos_ovrl"), [True] * 3)
