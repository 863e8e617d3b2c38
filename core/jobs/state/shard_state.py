"""A shard's job state: the latest record of each of its rows, as one Parquet file, plus the
journals written since.

OUT/.qtts/state.parquet (state-shard-I-of-N.parquet when sharded) holds one record per row the
shard has an outcome for. A run appends to its journal as rows finish and, when it ends (also on
interruption or error), compacts: state + its journals -> a new state file (written atomically)
-> the journals it read are removed. A kill between the two leaves records in both, which merge
to the same answer. Readers take a state and the journals beside it, newest record of an id
winning, so the state of a run still in progress (or killed) is read correctly too.
Knows file names and record tables; no rows beyond ids, no models.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.errors import FatalError
from qtts.core.jobs.output.writer import atomic_write
from qtts.core.jobs.state.journal import read_journals
from qtts.core.jobs.state.layout import Layout
from qtts.core.jobs.state.records import PENDING, conform, empty, latest, overlay
from qtts.core.jobs.work.shards import Shard

log = logging.getLogger("qtts")


class UnreadableState(FatalError):
    """A state file that cannot be read where its records must be shown as they are."""


def read_state_file(
    path: Path, columns: tuple[str, ...] | None = None, *, strict: bool = False
) -> pa.Table:
    """The file's records (columns: only these). Unreadable: none, so a run redoes its rows;
    strict (the views, qtts score): UnreadableState, so nothing is rebuilt without them."""
    try:
        present = pq.read_schema(path).names
        wanted = None if columns is None else [c for c in columns if c in present]
        table = conform(pq.read_table(path, columns=wanted), columns)
        pa.default_memory_pool().release_unused()  # the decoder's buffers, back to the OS
        return table
    except FileNotFoundError:
        return conform(empty(), columns)
    except (OSError, pa.ArrowException) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if strict:
            raise UnreadableState(
                f"the job state {path} is unreadable ({why}); restore it, or rerun its shard "
                "to redo its rows"
            ) from None
        log.warning("state %s is unreadable (%s): its rows will be redone", path, why)
        return conform(empty(), columns)


def read_own(
    out_dir: Path, shard: Shard, columns: tuple[str, ...] | None = None
) -> tuple[pa.Table, dict[Path, int]]:
    """(latest record per id of this shard's rows, pending ones included; bytes read per
    journal). columns: only these record columns (records.SCAN_COLUMNS)."""
    layout = Layout(out_dir)
    journals, sizes = read_journals(layout.own_journals(shard.suffix))
    if columns is not None:
        journals = journals.select(list(columns))
    records = overlay(read_state_file(layout.state(shard.suffix), columns), journals)
    return records.combine_chunks(), sizes  # one chunk: takes over it are single passes


def read_all(out_dir: Path, columns: tuple[str, ...] | None = None) -> pa.Table:
    """Latest record per id across every shard's state and every journal in the out dir
    (columns: only these; keep "id", "status", "run" and "t", which merging needs). Left in
    chunks: the caller takes from it once. An unreadable state raises UnreadableState: what
    reads every shard shows records, and must not show a shard's rows as never done."""
    layout = Layout(out_dir)
    states = [read_state_file(p, columns, strict=True) for p in layout.states()]
    base = pa.concat_tables(states) if states else conform(empty(), columns)
    if len(states) > 1 and pc.count_distinct(base["id"]).as_py() < base.num_rows:
        base = latest(base)  # shards own disjoint ids; this only mends a hand-edited out dir
    journals, _ = read_journals(layout.journals())
    if columns is not None:
        journals = journals.select(list(columns))
    return overlay(base, journals)


def compact(out_dir: Path, shard: Shard) -> pa.Table | None:
    """Fold this shard's journals into its state file; the shard's records after it, or None
    when no journal held anything (the state is as it was)."""
    journals = Layout(out_dir).own_journals(shard.suffix)
    if not any(p.stat().st_size for p in journals if p.exists()):
        for path in journals:
            _remove_if_size(path, 0)
        return None
    records, sizes = read_own(out_dir, shard)
    records = records.filter(pc.not_equal(records["status"], PENDING))
    write_state(Layout(out_dir).state(shard.suffix), records)
    for path, size in sizes.items():
        _remove_if_size(path, size)  # a journal that grew meanwhile is kept (and re-read later)
    return records


def write_state(path: Path, table: pa.Table) -> None:
    atomic_write(path, lambda f: pq.write_table(table, f, compression="zstd"))


def reset(out_dir: Path, shard: Shard) -> None:
    """--overwrite: this shard's earlier outcomes no longer count."""
    layout = Layout(out_dir)
    for path in [layout.state(shard.suffix), *layout.own_journals(shard.suffix)]:
        _remove_if_size(path, None)


def remove_every_shard(out_dir: Path) -> None:
    """--overwrite with another shard count: the old split's state is void."""
    layout = Layout(out_dir)
    for path in [*layout.states(), *layout.journals()]:
        _remove_if_size(path, None)


def _remove_if_size(path: Path, size: int | None) -> None:
    try:
        if size is None or os.stat(path).st_size == size:
            os.unlink(path)
    except FileNotFoundError:
        pass
