"""What the dataset card reads of results.parquet, a batch at a time: counts and the distinct
values it names come out the same whatever the batch size (batches of 2 rows here, so a value
seen in one batch and a count spread over several are both exercised)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qtts.core.quality import card_rows

ROWS = {
    "id": ["a", "b", "c", "d", "e", "f", "g"],
    "status": ["ok", "ok", "failed", "ok", None, "ok", "ok"],
    "kept": [True, False, None, True, None, None, True],
    "path": [
        "/o/data/s-0.tar",
        "/o/data/s-0.tar",
        None,
        "/o/data/s-1.tar",
        None,
        "/o/x.wav",
        "/o/y.flac",
    ],  # fmt: skip
    "member": ["a.wav", "b.wav", None, "d.wav", None, None, None],
    "sample_rate": [24000, 16000, None, 24000, None, 16000, 24000],  # a rerun stopped part way
    "num_samples": [10, 20, None, 40, None, 80, 160],
    "language": ["english", "chinese", "german", "English", None, "french", None],
    "model": ["m1", "m1", "m9", "m2", None, "m1", "m1"],
    "settings": ["s1", "s1", None, "s2", None, "s1", None],
}


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setattr(card_rows, "BATCH", 2)
    path = tmp_path / "results.parquet"
    pq.write_table(pa.table(ROWS), path, row_group_size=3)
    return path


def test_counts_and_names_over_batches(results):
    rows = card_rows.read_card_rows(results)
    assert (rows.total, rows.ok, rows.failed, rows.pending) == (7, 5, 1, 1)
    assert rows.kept == 3  # a null `kept` is not kept
    assert rows.kept_samples == 10 + 40 + 160
    assert rows.in_files == 2
    assert rows.sample_rates() == [(24000, 3), (16000, 2)]  # the commonest first, over batches
    assert rows.shard_paths == {"/o/data/s-0.tar", "/o/data/s-1.tar"}
    assert rows.suffixes == {".wav", ".flac"}
    assert rows.languages == {"english", "English"}  # the kept rows': the failed row's is not
    assert rows.models == {"m1", "m2"} and rows.settings == {"s1", "s2"}


def test_without_keep_rules_every_ok_row_is_kept(tmp_path):
    path = tmp_path / "results.parquet"
    pq.write_table(pa.table({k: v for k, v in ROWS.items() if k != "kept"}), path)
    rows = card_rows.read_card_rows(path)
    assert rows.kept == rows.ok == 5
    ok, kept = card_rows.ok_and_kept_ids(path)
    assert ok["id"].to_pylist() == kept["id"].to_pylist() == ["a", "b", "d", "f", "g"]


def test_ids_of_the_ok_and_the_kept_rows(results):
    ok, kept = card_rows.ok_and_kept_ids(results)
    assert ok.column_names == kept.column_names == ["id"]
    assert ok["id"].to_pylist() == ["a", "b", "d", "f", "g"]
    assert kept["id"].to_pylist() == ["a", "d", "g"]
