"""A shard's job state: the latest record of each of its rows, as one Parquet file, plus the
journals written since.

OUT/.qtts-state.parquet (.qtts-state-shard-I-of-N.parquet when sharded) holds one record per row
the shard has an outcome for. A run appends to its journal as rows finish and, when it ends
(also on interruption or error), compacts: state + its journals -> a new state file (written
atomically) -> the journals it read are removed. A kill between the two leaves records in both,
which merge to the same answer. Readers take a state and the journals beside it, newest record
of an id winning, so the state of a run still in progress (or killed) is read correctly too.
Knows file names and record tables; no rows beyond ids, no models.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.journal import read_journals
from qtts.core.jobs.records import conform, empty, latest, overlay
from qtts.core.jobs.shards import JOURNAL_GLOB, STATE_GLOB, Shard
from qtts.core.jobs.writer import atomic_write

log = logging.getLogger("qtts")


def read_state_file(path: Path) -> pa.Table:
    try:
        return conform(pq.read_table(path))
    except FileNotFoundError:
        return empty()
    except (OSError, pa.ArrowException) as e:
        log.warning("state %s is unreadable (%s): its rows will be redone", path, e)
        return empty()


def own_journals(out_dir: Path, shard: Shard) -> list[Path]:
    return sorted(p for p in out_dir.glob(JOURNAL_GLOB) if shard.owns_journal(p.name))


def read_own(out_dir: Path, shard: Shard) -> tuple[pa.Table, dict[Path, int]]:
    """(latest record per id of this shard's rows, pending ones included; bytes read per
    journal)."""
    journals, sizes = read_journals(own_journals(out_dir, shard))
    return overlay(read_state_file(out_dir / shard.state_name), journals), sizes


def read_all(out_dir: Path) -> pa.Table:
    """Latest record per id across every shard's state and every journal in the out dir."""
    states = [read_state_file(p) for p in sorted(out_dir.glob(STATE_GLOB))]
    base = pa.concat_tables(states) if states else empty()
    if len(states) > 1 and pc.count_distinct(base["id"]).as_py() < base.num_rows:
        base = latest(base)  # shards own disjoint ids; this only mends a hand-edited out dir
    journals, _ = read_journals(sorted(out_dir.glob(JOURNAL_GLOB)))
    return overlay(base, journals)


def compact(out_dir: Path, shard: Shard) -> bool:
    """Fold this shard's journals into its state file. True when the state changed."""
    records, sizes = read_own(out_dir, shard)
    if not any(sizes.values()):
        for path in sizes:
            _remove_if_size(path, 0)
        return False
    table = records.filter(pc.not_equal(records["status"], "pending"))
    write_state(out_dir / shard.state_name, table)
    for path, size in sizes.items():
        _remove_if_size(path, size)  # a journal that grew meanwhile is kept (and re-read later)
    return True


def write_state(path: Path, table: pa.Table) -> None:
    atomic_write(path, lambda f: pq.write_table(table, f, compression="zstd"))


def reset(out_dir: Path, shard: Shard) -> None:
    """--overwrite: this shard's earlier outcomes no longer count."""
    for path in [out_dir / shard.state_name, *own_journals(out_dir, shard)]:
        _remove_if_size(path, None)


def remove_every_shard(out_dir: Path) -> None:
    """--overwrite with another shard count: the old split's state is void."""
    for path in [*out_dir.glob(STATE_GLOB), *out_dir.glob(JOURNAL_GLOB)]:
        _remove_if_size(path, None)


def _remove_if_size(path: Path, size: int | None) -> None:
    try:
        if size is None or os.stat(path).st_size == size:
            os.unlink(path)
    except FileNotFoundError:
        pass
