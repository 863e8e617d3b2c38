"""Every shard's latest records read a column at a time: the merge is decided on a few columns,
each winner keeps its position, and any other column is read later, alone, and taken there. The
state files stay open from the first read to the last, so positions never point into a file a
finishing shard replaced (docs/job-state.md, "Scale"). Knows state files, journals and the merge."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.state.journal import read_journals
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.records import RECORD_SCHEMA, conform, empty, latest, one_chunk, overlay
from qtts.core.jobs.state.shard_state import read_columns, unreadable_state

POSITION = "_position"  # a winner's row in the states (in turn), then the journals' records


@dataclass
class RecordSource:
    states: list[tuple[Path, pq.ParquetFile]]  # held open: read as when the merge was decided
    journals: pa.Table  # the journals' records, every column asked for
    winners: pa.Table  # the merge's columns of each id's latest record, one chunk, + POSITION

    @classmethod
    def open(
        cls,
        out_dir: Path,
        merge: tuple[str, ...],
        later: tuple[str, ...],
        *,
        shard_suffix: str | None = None,
    ) -> RecordSource:
        """merge: the columns read now (id, status, run and t among them); later: those `column`
        may be asked for; shard_suffix: one shard's state and journals only (None: every one)."""
        paths = StatePaths(out_dir)
        own = shard_suffix is not None
        states, bases, offset = [], [], 0
        for path in [paths.state(shard_suffix)] if own else paths.states():
            opened = _open(path, merge)
            if opened is None:  # removed since it was listed (--overwrite): it holds nothing
                continue
            handle, table = opened
            bases.append(_positioned(table, offset))
            offset += table.num_rows
            states.append((path, handle))
        base = pa.concat_tables(bases) if bases else _positioned(conform(empty(), merge), 0)
        del bases
        if len(states) > 1 and pc.count_distinct(base["id"]).as_py() < base.num_rows:
            base = latest(base)  # shards own disjoint ids; this only mends a hand-edited out dir
        journal_paths = paths.own_journals(shard_suffix) if own else paths.journals()
        journals, _ = read_journals(journal_paths, tuple(dict.fromkeys((*merge, *later))))
        held = [overlay(base, _positioned(journals.select(list(merge)), offset))]
        del base  # held hands the only reference to one_chunk
        return cls(states, journals, one_chunk(held))

    def column(self, name: str) -> pa.ChunkedArray:
        """Every record's `name`, states then journals, indexed by POSITION (type as recorded).
        A state that cannot be read now raises UnreadableState naming it."""
        field = RECORD_SCHEMA.field(name)
        chunks = []
        for path, handle in self.states:
            try:
                if name in handle.schema_arrow.names:
                    chunk = handle.read(columns=[name])[name].cast(field.type)
                else:  # a state written before the column existed
                    chunk = pa.chunked_array([pa.nulls(handle.metadata.num_rows, field.type)])
            except (OSError, pa.ArrowException) as e:
                raise unreadable_state(path, e) from None
            chunks.extend(chunk.chunks)
        chunks.extend(self.journals[name].cast(field.type).chunks)
        return pa.chunked_array(chunks, field.type)

    def close(self) -> None:
        for _, handle in self.states:
            handle.close()
        self.states = []

    def positions(self) -> np.ndarray:
        return self.winners[POSITION].to_numpy()


def _open(path: Path, columns: tuple[str, ...]) -> tuple[pq.ParquetFile, pa.Table] | None:
    """The state, held open, and its `columns`; None when there is none."""
    try:
        handle = pq.ParquetFile(path)
        return handle, read_columns(handle, columns)
    except FileNotFoundError:
        return None
    except (OSError, pa.ArrowException) as e:
        raise unreadable_state(path, e) from None


def _positioned(table: pa.Table, offset: int) -> pa.Table:
    return table.append_column(POSITION, pa.array(np.arange(offset, offset + table.num_rows)))
