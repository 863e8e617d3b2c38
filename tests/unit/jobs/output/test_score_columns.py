"""The score columns every rebuild of an out dir's views joins from OUT/scores.parquet: by id,
and only while the row's record is the one that was scored (a redone row's score is stale)."""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.parquet as pq

from qtts.core.jobs.output.score_columns import (
    SCORE_FIELDS,
    SCORES_NAME,
    record_stamps,
    with_scores,
)


def _records() -> pa.Table:
    return pa.table({"id": ["a", "b", "c"], "t": [1.5, 2.25, 3.0]})


def test_scores_join_by_id_while_the_record_is_the_one_scored(tmp_path):
    t = _records()["t"]
    pq.write_table(pa.table({"id": ["c", "a", "b"], "file_name": ["c.wav", "a.wav", "b.wav"],
                             "stamp": [record_stamps(t)[2].as_py(), record_stamps(t)[0].as_py(),
                                       "0.5"],  # b was redone since it was scored
                             "dnsmos_ovrl": [3.5, 2.0, 4.0]}), tmp_path / SCORES_NAME)  # fmt: skip
    out = with_scores(_records(), tmp_path)
    assert out.column_names == ["id", "t", *SCORE_FIELDS.names]
    assert out["dnsmos_ovrl"].to_pylist() == [2.0, None, 3.5]
    assert out["asr_text"].null_count == 3  # a column the file lacks is null
    assert out.schema.field("asr_text").type == pa.large_string()


def test_without_a_scores_file_the_records_are_unchanged(tmp_path):
    assert with_scores(_records(), tmp_path).equals(_records())


def test_an_unreadable_scores_file_is_left_out_with_a_warning(tmp_path, caplog):
    (tmp_path / SCORES_NAME).write_bytes(b"not parquet")
    with caplog.at_level(logging.WARNING, logger="qtts"):
        assert with_scores(_records(), tmp_path).equals(_records())
    assert "left out of results.parquet" in caplog.text
