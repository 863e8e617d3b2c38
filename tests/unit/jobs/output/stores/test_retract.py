"""Rows taken out of archive shards before they are redone: every id exactly once, also when a
kill cuts the retraction short."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from store_rows import archive_store, row

from qtts.core.jobs.output.stores import retract
from qtts.core.jobs.output.stores.registry import find
from qtts.core.jobs.state.journal import Journal, read_journals
from qtts.core.jobs.state.paths import StatePaths


def _archive(tmp_path, ids, layout="webdataset"):
    journal = Journal(tmp_path / "j.jsonl")
    store = archive_store(tmp_path, layout, journal, shard_rows=10)
    for i in ids:
        store.submit(row(i)).result()
    store.close()
    records, _ = read_journals([journal.path])
    return records.select(["id", "file"])


def _statuses(journal):
    table, _ = read_journals([journal.path])
    return dict(zip(table["id"].to_pylist(), table["status"].to_pylist(), strict=True))


def test_partial_retraction_rewrites_the_shard_without_those_rows(tmp_path):
    for layout in ("webdataset", "parquet"):
        out = tmp_path / layout
        records = _archive(out, ["a", "b.1", "c"], layout)
        journal = Journal(out / ".qtts" / "j2.jsonl")
        (out / ".qtts").mkdir()
        picked = records.filter(pa.array([False, True, False]))
        n = retract.retract(out, "", journal, "run2", picked["id"], picked["file"], layout=layout)
        fmt = find(layout)
        shard = out / "data" / fmt.key.name("w-000000")
        assert n.to_pylist() == ["b.1"] and fmt.keys_in(fmt.key, shard) == ["a", "c"]
        assert _statuses(journal) == {"b.1": "pending"}
        assert not StatePaths(out).retract_intent("").exists()


def test_retracting_every_row_removes_the_shard(tmp_path):
    records = _archive(tmp_path, ["a", "b"])
    (tmp_path / ".qtts").mkdir()
    journal = Journal(tmp_path / ".qtts" / "j2.jsonl")
    retract.retract(tmp_path, "", journal, "r", records["id"], records["file"], layout="parquet")
    assert list((tmp_path / "data").iterdir()) == []


def test_a_killed_retraction_is_finished_by_the_next_run(tmp_path):
    records = _archive(tmp_path, ["a", "b", "c"])
    (tmp_path / ".qtts").mkdir()
    # killed after the intent was written: no pending record, the shard untouched
    pq.write_table(records.slice(0, 2), StatePaths(tmp_path).retract_intent("-shard-0-of-2"))
    journal = Journal(tmp_path / ".qtts" / "j2.jsonl")
    retract.finish(tmp_path, "-shard-0-of-2", journal, "next")
    fmt = find("webdataset")
    assert fmt.keys_in(fmt.key, tmp_path / "data" / "w-000000.tar") == ["c"]
    assert _statuses(journal) == {"a": "pending", "b": "pending"}
    assert not StatePaths(tmp_path).retract_intent("-shard-0-of-2").exists()


def test_files_are_retracted_only_when_the_run_writes_another_layout(tmp_path):
    (tmp_path / ".qtts").mkdir()
    (tmp_path / "a.wav").write_bytes(b"x")
    (tmp_path / "a.codes.npy").write_bytes(b"x")
    journal = Journal(tmp_path / ".qtts" / "j.jsonl")
    ids, files = pa.array(["a"]), pa.array(["a.wav"])
    assert retract.retract(tmp_path, "", journal, "r", ids, files, layout="files").to_pylist() == []
    assert (tmp_path / "a.wav").exists()  # replaced by name when redone
    assert retract.retract(
        tmp_path, "", journal, "r", ids, files, layout="webdataset"
    ).to_pylist() == ["a"]
    assert not (tmp_path / "a.wav").exists() and not (tmp_path / "a.codes.npy").exists()
