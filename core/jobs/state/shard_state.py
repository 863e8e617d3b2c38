"""A shard's job state: one Parquet file of the latest record of each of its rows, the journals
folded into it at the end of every run (docs/job-state.md, "Records"). Knows file names and
record tables; no rows beyond ids, no models."""

from __future__ import annotations

import logging
import os
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.errors import FatalError
from qtts.core.jobs.state.atomic_files import atomic_write
from qtts.core.jobs.state.journal import journal_pieces, read_journals
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.records import (
    MERGE_COLUMNS,
    PENDING,
    RECORD_SCHEMA,
    conform,
    empty,
    latest,
    overlay,
)
from qtts.core.jobs.state.shards import Shard

log = logging.getLogger("qtts")


class UnreadableState(FatalError):
    """A state file that cannot be read where its records must be shown as they are."""


def read_state_file(
    path: Path, columns: tuple[str, ...] | None = None, *, strict: bool = False
) -> pa.Table:
    """The file's records (columns: only these). Unreadable: none, so a run redoes its rows;
    strict (the views, qtts score): UnreadableState, so nothing is rebuilt without them."""
    try:
        with pq.ParquetFile(path) as handle:
            return read_columns(handle, columns)
    except FileNotFoundError:
        return conform(empty(), columns)
    except (OSError, pa.ArrowException) as e:
        if strict:
            raise unreadable_state(path, e) from None
        log.warning("state %s is unreadable (%s): its rows will be redone", path, _why(e))
        return conform(empty(), columns)


def read_columns(handle: pq.ParquetFile, columns: tuple[str, ...] | None) -> pa.Table:
    """conform(the file's records), a column at a time: the records are never held twice."""
    present = set(handle.schema_arrow.names)
    schema = conform(empty(), columns).schema
    arrays = []
    for field in schema:
        if field.name in present:
            column = handle.read(columns=[field.name])[field.name]
            arrays.append(column.cast(field.type).combine_chunks())
        else:  # a state written before the column existed
            arrays.append(pa.nulls(handle.metadata.num_rows, field.type))
        pa.default_memory_pool().release_unused()  # the decoder's buffers, back to the OS
    return pa.Table.from_arrays(arrays, schema=schema)


def unreadable_state(path: Path, error: Exception) -> UnreadableState:
    return UnreadableState(
        f"the job state {path} is unreadable ({_why(error)}); restore it, or rerun its shard "
        "to redo its rows"
    )


def _why(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def read_own(out_dir: Path, shard: Shard, columns: tuple[str, ...] | None = None) -> pa.Table:
    """The latest record per id of this shard's rows, pending included."""
    paths = StatePaths(out_dir)
    wanted = None if columns is None else tuple(_with_merge(columns))
    journals, _ = read_journals(paths.own_journals(shard.suffix), wanted)
    records = overlay(read_state_file(paths.state(shard.suffix), columns), journals)
    return records.combine_chunks()  # one chunk: takes over it are single passes


def read_all(out_dir: Path, columns: tuple[str, ...] | None = None) -> pa.Table:
    """Latest record per id across every shard's state and journal (columns: only these), left
    in chunks. An unreadable state raises UnreadableState: no shard's rows show as never done."""
    paths = StatePaths(out_dir)
    states = [read_state_file(p, columns, strict=True) for p in paths.states()]
    base = pa.concat_tables(states) if states else conform(empty(), columns)
    if len(states) > 1 and pc.count_distinct(base["id"]).as_py() < base.num_rows:
        base = latest(base)  # shards own disjoint ids; this only mends a hand-edited out dir
    wanted = None if columns is None else tuple(_with_merge(columns))
    journals, _ = read_journals(paths.journals(), wanted)
    return overlay(base, journals)


def _with_merge(columns: tuple[str, ...]) -> list[str]:
    """columns, and the merge columns (a killed run's pending record is settled by its `run`)."""
    return list(dict.fromkeys((*columns, *MERGE_COLUMNS)))


def compact(out_dir: Path, shard: Shard, columns: tuple[str, ...] | None = None) -> pa.Table | None:
    """Fold this shard's journals into its state file; the shard's records after it (columns:
    only these), or None when no journal held anything. Streamed: the merge is decided on
    MERGE_COLUMNS, then the state is copied a row group and the journals a piece at a time, each
    less the records that lost."""
    paths = StatePaths(out_dir)
    journals = paths.own_journals(shard.suffix)
    if not any(p.stat().st_size for p in journals if p.exists()):
        for path in journals:
            _remove_if_size(path, 0)
        return None
    path = paths.state(shard.suffix)
    handle, base = _open_state(path)
    try:
        keep, sizes = _winners(base, journals)
        del base
        kept: list[pa.Table] = []

        def write(f: BinaryIO) -> None:
            with pq.ParquetWriter(f, RECORD_SCHEMA, compression="zstd") as writer:
                for part in _records(handle, journals, sizes, keep):
                    writer.write_table(part, row_group_size=STATE_ROWS)
                    kept.append(part if columns is None else part.select(list(columns)))

        atomic_write(path, write)
    finally:
        if handle is not None:
            handle.close()
    for journal, size in sizes.items():
        _remove_if_size(journal, size)  # a journal that grew meanwhile is kept (and re-read later)
    return pa.concat_tables(kept) if kept else conform(empty(), columns)


STATE_ROWS = 1 << 18  # a state's row group: what a compaction holds of every column at once


def _open_state(path: Path) -> tuple[pq.ParquetFile | None, pa.Table]:
    """The state held open, and its merge columns (none when missing or unreadable: redone)."""
    handle = None
    try:
        handle = pq.ParquetFile(path)
        return handle, read_columns(handle, MERGE_COLUMNS)
    except FileNotFoundError:
        pass
    except (OSError, pa.ArrowException) as e:
        log.warning("state %s is unreadable (%s): its rows will be redone", path, _why(e))
        if handle is not None:
            handle.close()
    return None, conform(empty(), MERGE_COLUMNS)


_POSITION = "_position"  # a record's place: the state's rows, then the journals'


def _winners(base: pa.Table, journals: list[Path]) -> tuple[np.ndarray, dict[Path, int]]:
    """(per record, state's then journals': its id's latest and not pending; bytes read)."""
    newer, sizes = read_journals(journals, MERGE_COLUMNS)
    total = base.num_rows + newer.num_rows
    base = base.append_column(_POSITION, pa.array(np.arange(base.num_rows)))
    newer = newer.append_column(_POSITION, pa.array(np.arange(base.num_rows, total)))
    winners = overlay(base, newer)
    winners = winners.filter(pc.not_equal(winners["status"], PENDING))
    keep = np.zeros(total, dtype=bool)
    keep[winners[_POSITION].to_numpy()] = True
    return keep, sizes


def _records(
    handle: pq.ParquetFile | None, journals: list[Path], sizes: dict[Path, int], keep: np.ndarray
):
    """The winning records (every column), a state row group or a journal piece at a time."""
    at = 0
    for group in range(handle.num_row_groups if handle is not None else 0):
        part = conform(handle.read_row_group(group))
        yield part.filter(pa.array(keep[at : at + part.num_rows]))
        at += part.num_rows
    for journal in journals:
        for part in journal_pieces(journal, sizes.get(journal, 0)):
            yield part.filter(pa.array(keep[at : at + part.num_rows]))
            at += part.num_rows


def write_state(path: Path, table: pa.Table) -> None:
    atomic_write(
        path, lambda f: pq.write_table(table, f, compression="zstd", row_group_size=STATE_ROWS)
    )


def reset(out_dir: Path, shard: Shard | None) -> None:
    """--overwrite: this shard's earlier outcomes no longer count (None: every shard's, the old
    split's when the shard count changes)."""
    paths = StatePaths(out_dir)
    if shard is None:
        doomed = [*paths.states(), *paths.journals()]
    else:
        doomed = [paths.state(shard.suffix), *paths.own_journals(shard.suffix)]
    for path in doomed:
        _remove_if_size(path, None)


def _remove_if_size(path: Path, size: int | None) -> None:
    with suppress(FileNotFoundError):
        if size is None or os.stat(path).st_size == size:
            os.unlink(path)
