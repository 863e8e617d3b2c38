"""RecordSource, the merge read a column at a time, against read_all (its twin): the same
winners, each column the same at their positions, and a state replaced meanwhile still read as
it was when the merge was decided."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qtts.core.jobs.state import shard_state as state
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.record_source import RecordSource
from qtts.core.jobs.state.records import to_table
from qtts.core.jobs.state.shards import Shard

MERGE = ("id", "status", "file", "bytes", "run", "t")
LATER = ("text", "num_frames", "error", "segment_frames", "chars_per_s")


def rec(row_id, status="ok", t=1.0, run="R1", **kw):
    return {
        "id": row_id,
        "status": status,
        "t": t,
        "run": run,
        "file": f"{row_id}.wav",
        "bytes": 44,
        "text": f"text of {row_id} at {t}",
        "num_frames": int(t * 10),
        "segment_frames": [1, 2] if row_id.endswith("7") else None,
        **kw,
    }


def _out_dir(tmp_path):
    """Two sharded states (one compacted twice), journals of both shards and of a Ray actor,
    with pending records, a run's own pending-then-ok, and a re-done row."""
    paths = StatePaths(tmp_path)
    paths.dir.mkdir()
    first, second = Shard(2, 0), Shard(2, 1)
    Journal(paths.journal(first.suffix)).append([rec(f"a{i}", t=1 + i / 100) for i in range(30)])
    state.compact(tmp_path, first)
    Journal(paths.journal(second.suffix)).append(
        [rec(f"b{i}", "failed" if i % 5 == 0 else "ok", t=2) for i in range(20)]
    )
    state.compact(tmp_path, second)
    Journal(paths.journal(first.suffix)).append(
        [rec("a3", "pending", 5, run="R2"), rec("a3", "ok", 4, run="R2"), rec("a4", "pending", 6)]
    )
    Journal(paths.journal(second.suffix)).append([rec("b7", "ok", 9, run="R3", error=None)])
    Journal(paths.ray_journal("x")).append([rec("c1", t=3), rec("a17", "failed", 8, error="e")])
    return tmp_path


def test_the_winners_and_their_columns_are_read_alls(tmp_path):
    out = _out_dir(tmp_path)
    twin = state.read_all(out, (*MERGE, *LATER)).combine_chunks()
    source = RecordSource.open(out, MERGE, LATER)
    winners = source.winners
    assert winners.num_rows == twin.num_rows == 30 + 20 + 1
    order = np.argsort(np.array(winners["id"].to_pylist()))
    twin_order = np.argsort(np.array(twin["id"].to_pylist()))
    for name in MERGE:
        assert winners[name].take(order).equals(twin[name].take(twin_order)), name
    at = pa.array(source.positions()[order])
    for name in LATER:
        column = source.column(name)
        assert column.take(at).equals(twin[name].take(twin_order)), name
    by_id = dict(zip(winners["id"].to_pylist(), winners["status"].to_pylist(), strict=True))
    assert by_id["a3"] == "ok" and by_id["a4"] == "pending" and by_id["a17"] == "failed"


def test_a_state_replaced_after_the_merge_is_read_as_it_was(tmp_path):
    """A shard that finishes while the views are rebuilt replaces its state file: the positions
    the merge gave still point into the file it read."""
    out = _out_dir(tmp_path)
    source = RecordSource.open(out, MERGE, LATER)
    before = source.column("text").take(pa.array(source.positions()))
    paths = StatePaths(out)
    for shard in (Shard(2, 0), Shard(2, 1)):
        Journal(paths.journal(shard.suffix)).append([rec(f"new{shard.suffix}", t=99)])
        state.compact(out, shard)  # rewritten: other rows, other order
    assert source.column("text").take(pa.array(source.positions())).equals(before)


def test_an_unreadable_state_names_the_file(tmp_path):
    out = _out_dir(tmp_path)
    StatePaths(out).states()[0].write_bytes(b"not parquet")
    with pytest.raises(state.UnreadableState, match=r"state-shard-0-of-2\.parquet is unreadable"):
        RecordSource.open(out, MERGE, LATER)


def test_a_state_without_a_newer_column_reads_it_as_null(tmp_path):
    out = tmp_path
    StatePaths(out).dir.mkdir()
    old = to_table([rec("a"), rec("b")]).drop_columns(["chars_per_s", "segment_frames"])
    pq.write_table(old, StatePaths(out).state(""))
    source = RecordSource.open(out, MERGE, LATER)
    assert source.column("chars_per_s").null_count == 2
    assert source.column("text").to_pylist() == ["text of a at 1.0", "text of b at 1.0"]
