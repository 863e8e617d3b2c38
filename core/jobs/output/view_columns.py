"""The views' record columns, read one at a time and staged on disk in view order, so a rebuild
holds the widest column once, plus a batch (docs/job-state.md, "Scale").
Knows Arrow files and positions; nothing of what the columns mean.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from qtts.core.jobs.state.record_source import RecordSource

COMPRESSION = "lz4"  # fast both ways; the staged files live for one rebuild


class StagedColumns:
    """Record columns for the views, a batch of `size` input rows at a time: batch k holds the
    records shown by input rows k*size .. (k+1)*size - 1 that show one (`shown`: per input row,
    the index of its record in source.winners, or -1), in input order."""

    def __init__(self, folder: Path, source: RecordSource, shown: np.ndarray, size: int):
        self.folder, self.size = folder, size
        self._readers: dict[str, pa.ipc.RecordBatchFileReader] = {}
        self._source, self._shown = source, shown

    def __enter__(self) -> StagedColumns:
        shutil.rmtree(self.folder, ignore_errors=True)  # a killed rebuild's
        self.folder.mkdir(parents=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._readers.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    def stage(self, name: str) -> None:
        """Read `name` for every record once; write it in view order, batch by batch."""
        values = self._source.column(name)
        chunks = values.chunks
        starts = np.cumsum([0, *(len(c) for c in chunks)])
        positions = self._source.positions()
        path = self.folder / f"{len(self._readers):03d}.arrow"
        schema = pa.schema([pa.field(name, values.type)])
        options = pa.ipc.IpcWriteOptions(compression=COMPRESSION)
        sink = pa.OSFile(str(path), "wb")
        with sink, pa.ipc.new_file(sink, schema, options=options) as out:
            for start in range(0, len(self._shown), self.size):
                at = self._shown[start : start + self.size]
                taken = _gather(chunks, starts, positions[at[at >= 0]], values.type)
                out.write_batch(pa.record_batch([taken], schema=schema))
        del values, chunks
        pa.default_memory_pool().release_unused()
        self._readers[name] = pa.ipc.open_file(pa.OSFile(str(path), "rb"))

    def batch(self, k: int) -> Iterator[tuple[str, pa.Array]]:
        """Batch k of every staged column, in staging order."""
        for name, reader in self._readers.items():
            yield name, reader.get_batch(k).column(0)


def _gather(
    chunks: list[pa.Array], starts: np.ndarray, at: np.ndarray, type_: pa.DataType
) -> pa.Array:
    """The values at positions `at` of the chunks laid end to end, in `at`'s order. Each chunk
    is taken from alone: pyarrow's take on a chunked array first joins every chunk into one
    (a second copy of the whole column, per call)."""
    chunk_of = np.searchsorted(starts, at, side="right") - 1
    order = np.argsort(chunk_of, kind="stable")
    by_chunk = chunk_of[order]
    parts = []
    for c in np.unique(by_chunk):
        inside = order[np.searchsorted(by_chunk, c) : np.searchsorted(by_chunk, c, side="right")]
        parts.append(chunks[c].take(pa.array(at[inside] - starts[c])))
    joined = pa.concat_arrays(parts) if parts else pa.array([], type_)
    return joined.take(pa.array(np.argsort(order, kind="stable")))
