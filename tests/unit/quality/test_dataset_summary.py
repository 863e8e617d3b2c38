"""qtts results' quality summary over results.parquet: percentiles and named thresholds."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qtts.core.quality import dataset_summary as ds


def _write(tmp_path, columns: dict) -> object:
    path = tmp_path / "results.parquet"
    pq.write_table(pa.table(columns), path)
    return path


def test_percentiles_over_ok_rows_only(tmp_path):
    rng = np.random.default_rng(0)
    durations = rng.uniform(1, 10, 200)
    status = ["ok"] * 150 + ["failed"] * 50
    path = _write(tmp_path, {"status": status, "duration_s": durations})
    summary = ds.summarize_results(path)
    assert summary["ok"] == 150
    want = np.percentile(durations[:150], ds.PERCENTILES)
    got = [summary["percentiles"]["duration_s"][f"p{p}"] for p in ds.PERCENTILES]
    assert got == pytest.approx(want, abs=1e-4)  # rounded to 4 digits
    assert summary["percentiles"]["duration_s"]["n"] == 150
    assert "dnsmos_ovrl" not in summary["percentiles"]  # not scored: left out
    assert summary["kept"] is None


def test_each_named_threshold_counts_its_rows(tmp_path):
    path = _write(
        tmp_path,
        {
            "status": ["ok"] * 6 + ["failed"],
            "hit_frame_budget": [True, False, False, False, False, False, True],
            "peak": [1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0],
            "silence_ratio": [0.0, 0.6, 0.0, 0.0, 0.0, 0.0, 0.9],
            "repeat_ratio": [0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.9],
            "dnsmos_ovrl": [3.2, 2.5, None, 3.1, 3.4, 3.3, 1.0],
            "cer": [0.0, 0.0, 0.3, None, 0.0, 0.0, 1.0],
        },
    )
    outside = ds.summarize_results(path)["outside"]
    assert outside == {"hit_frame_budget": 1, "clipped": 1, "mostly_silent": 1, "looping": 1,
                       "low_dnsmos": 1, "high_cer": 1}  # fmt: skip
    assert "rate_off" not in outside  # no chars_per_s column: not counted


def test_speaking_rate_is_judged_against_its_languages_median(tmp_path):
    # English near 14 chars/s, Chinese near 4: 4 chars/s is normal in Chinese, slow in English.
    english = [14.0, 13.0, 15.0, 14.0, 4.0, 40.0]
    chinese = [4.0, 4.5, 3.5, 4.0, 12.0]
    path = _write(tmp_path, {"status": ["ok"] * 11, "chars_per_s": english + chinese,
                             "language": ["english"] * 6 + ["chinese"] * 5})  # fmt: skip
    assert ds.summarize_results(path)["outside"]["rate_off"] == 3  # 4.0 and 40.0 en, 12.0 zh


def test_summary_lines_name_the_flags_and_the_kept_count(tmp_path):
    path = _write(tmp_path, {"status": ["ok", "ok"], "repeat_ratio": [0.0, 0.9],
                             "kept": [True, False]})  # fmt: skip
    lines = ds.summary_lines(ds.summarize_results(path))
    assert lines[0].startswith("quality of 2 ok rows")
    assert any(line.strip().startswith("repeat_ratio") for line in lines)
    assert "looping 1" in lines[-2]
    assert "the keep rules keep 1 of them" in lines[-1]  # in every layout, not metadata.jsonl
