"""The views' staged columns: the per-chunk gather equals pyarrow's own take (its twin), the
batches line up with the input rows that show a record, and the staging folder never outlives
its rebuild."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from qtts.core.jobs.output.view_columns import StagedColumns, _gather


@pytest.mark.parametrize("seed", range(5))
def test_the_gather_equals_take_on_the_chunked_column(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 50, size=rng.integers(1, 8))  # empty chunks too
    chunks = [pa.array([f"v{seed}-{k}-{i}" for i in range(n)], pa.large_string()) for k, n in
              enumerate(sizes)]  # fmt: skip
    column = pa.chunked_array(chunks, pa.large_string())
    starts = np.cumsum([0, *sizes])
    for n in (0, 1, 17, 200):
        at = rng.integers(0, max(len(column), 1), size=n if len(column) else 0)
        got = _gather(chunks, starts, at, column.type)
        assert got.equals(column.take(pa.array(at, pa.int64())).combine_chunks())


class Source:  # what StagedColumns asks of a RecordSource
    def __init__(self, values, positions):
        self.values, self._positions = values, positions

    def column(self, name):
        return pa.chunked_array([self.values[name][:3], self.values[name][3:]])

    def positions(self):
        return self._positions


def test_batches_hold_the_shown_records_of_their_input_rows_in_order(tmp_path):
    values = {"text": pa.array(list("abcdef")), "num": pa.array([0, 1, 2, 3, 4, 5])}
    positions = np.array([5, 4, 3, 2, 1, 0])  # winner w lives at position 5 - w
    shown = np.array([0, -1, 2, 5, -1, -1, 1, 3])  # per input row: its winner, or none
    folder = tmp_path / "stage"
    (folder / "left").mkdir(parents=True)  # a killed rebuild's
    with StagedColumns(folder, Source(values, positions), shown, 3) as staged:
        assert not (folder / "left").exists()
        staged.stage("text")
        staged.stage("num")
        got = [{n: c.to_pylist() for n, c in staged.batch(k)} for k in range(3)]
    assert got == [
        {"text": ["f", "d"], "num": [5, 3]},
        {"text": ["a"], "num": [0]},
        {"text": ["e", "c"], "num": [4, 2]},
    ]
    assert not folder.exists()


def test_a_rebuild_in_small_batches_shows_read_alls_records(tmp_path, monkeypatch):
    """results.parquet written from staged columns, batch by batch, against the records as
    read_all merges them whole (the twin); nothing staged is left."""
    import pyarrow.parquet as pq

    from qtts.core.jobs.output import results, views
    from qtts.core.jobs.state import shard_state
    from qtts.core.jobs.state.journal import Journal
    from qtts.core.jobs.state.paths import StatePaths
    from qtts.core.jobs.state.shards import UNSHARDED

    paths = StatePaths(tmp_path)
    paths.dir.mkdir()
    ids = [f"r{i}" for i in range(11)]
    records = []
    for i, row_id in enumerate(ids):
        ok = i % 3 != 1
        (tmp_path / f"{row_id}.wav").write_bytes(b"x" * 44)
        records.append({"id": row_id, "status": "ok" if ok else "failed", "t": 1.0 + i,
                        "file": f"{row_id}.wav" if ok else None, "bytes": 44 if ok else None,
                        "text": f"text {i}", "num_frames": i, "run": "R", "error": None if ok
                        else "boom"})  # fmt: skip
    Journal(paths.journal("")).append(records[::-1])
    shard_state.compact(tmp_path, UNSHARDED)
    Journal(paths.journal("")).append([{**records[4], "text": "redone", "t": 50.0}])
    rows = pa.table({"row": list(range(12)), "id": [*ids[:6], None, *ids[6:]],
                     "text": [None] * 6 + ["no id"] + [None] * 5})  # fmt: skip
    monkeypatch.setattr(views, "BATCH", 4)
    counts = results.rebuild(tmp_path, rows, wait_s=5)
    got = pq.read_table(tmp_path / results.RESULTS_NAME).to_pylist()
    assert [r["row"] for r in got] == list(range(12)) and counts.total == 12
    twin = {r["id"]: r for r in shard_state.read_all(tmp_path).to_pylist()}
    for r in got:
        if r["id"] is None:
            assert r["status"] == "failed" and r["error"] == "id is null" and r["text"] == "no id"
            continue
        want = twin[r["id"]]
        assert (r["status"], r["text"], r["num_frames"], r["error"]) == (
            want["status"], want["text"], want["num_frames"], want["error"])  # fmt: skip
    assert got[4]["text"] == "redone"
    assert not paths.view_staging.exists()


def _small_out_dir(tmp_path):
    from qtts.core.jobs.state import shard_state
    from qtts.core.jobs.state.journal import Journal
    from qtts.core.jobs.state.paths import StatePaths
    from qtts.core.jobs.state.shards import UNSHARDED

    StatePaths(tmp_path).dir.mkdir()
    records = []
    for i in range(5):
        (tmp_path / f"r{i}.wav").write_bytes(b"x" * 44)
        records.append({"id": f"r{i}", "status": "ok", "t": 1.0, "file": f"r{i}.wav",
                        "bytes": 44, "text": f"old {i}", "run": "R"})  # fmt: skip
    Journal(StatePaths(tmp_path).journal("")).append(records)
    shard_state.compact(tmp_path, UNSHARDED)
    rows = pa.table({"row": list(range(5)), "id": [f"r{i}" for i in range(5)],
                     "text": pa.nulls(5, pa.large_string())})  # fmt: skip
    return records, rows


def test_a_state_that_fails_to_read_mid_rebuild_is_read_again_if_it_changed(tmp_path, monkeypatch):
    """Where a replaced state is not kept for its open readers (NFS), the column pass fails:
    the state changed under the round, so the next round reads the new one."""
    import pyarrow.parquet as pq

    from qtts.core.jobs.output import results
    from qtts.core.jobs.state import record_source, shard_state
    from qtts.core.jobs.state.journal import Journal
    from qtts.core.jobs.state.paths import StatePaths
    from qtts.core.jobs.state.shards import UNSHARDED

    records, rows = _small_out_dir(tmp_path)
    real, calls = record_source.RecordSource.column, []

    def column(self, name):
        calls.append(name)
        if len(calls) == 1:  # another process finishes: the state is replaced, this read fails
            Journal(StatePaths(tmp_path).journal("")).append(
                [{**records[2], "text": "new", "t": 2.0}]
            )
            shard_state.compact(tmp_path, UNSHARDED)
            raise shard_state.unreadable_state(self.states[0][0], OSError("Stale file handle"))
        return real(self, name)

    monkeypatch.setattr(record_source.RecordSource, "column", column)
    assert results.rebuild(tmp_path, rows, wait_s=5).ok == 5
    texts = pq.read_table(tmp_path / results.RESULTS_NAME)["text"].to_pylist()
    assert texts == ["old 0", "old 1", "new", "old 3", "old 4"]


def test_a_state_that_fails_to_read_unchanged_is_an_unreadable_state(tmp_path, monkeypatch):
    """A damaged column that the merge does not read: the views are kept, the file named."""
    from qtts.core.jobs.output import results
    from qtts.core.jobs.state import record_source, shard_state

    _, rows = _small_out_dir(tmp_path)
    results.rebuild(tmp_path, rows, wait_s=5)
    before = (tmp_path / results.RESULTS_NAME).read_bytes()

    def column(self, name):
        raise shard_state.unreadable_state(self.states[0][0], OSError("bad column chunk"))

    monkeypatch.setattr(record_source.RecordSource, "column", column)
    (tmp_path / "r0.wav").touch()  # something to rebuild for
    with pytest.raises(shard_state.UnreadableState, match=r"state\.parquet is unreadable.*kept"):
        results.rebuild(tmp_path, rows, wait_s=5)
    assert (tmp_path / results.RESULTS_NAME).read_bytes() == before
    assert not (tmp_path / ".qtts" / "view-columns").exists()
