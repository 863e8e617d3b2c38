"""A big job's texts kept off the heap while the run decides its work: the text column written
once to a file in OUT/.qtts/, memory-mapped back and the file unlinked at once.

Deciding the work (the resume scan, the split and budget rechecks) compares text digests, not
texts; only the rows a run synthesizes or rechecks read their text. Mapped, a text is paged in
when it is read and the kernel may drop it again, so a rerun of a finished ten-million-row job
no longer holds about a gigabyte of texts it never reads. The file has no name once mapped: a
killed run leaves nothing behind. Small jobs keep their texts on the heap.
Knows one Arrow column and a folder; nothing of rows' meaning.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa

SPILL_ROWS = 1 << 19  # fewer rows than this: a few tens of MB, not worth a file


def spilled(table: pa.Table, folder: Path, column: str = "text") -> pa.Table:
    """table with `column` read from a memory-mapped copy (unchanged under SPILL_ROWS rows)."""
    if table.num_rows < SPILL_ROWS or column not in table.column_names:
        return table
    values = table[column]
    schema = pa.schema([table.schema.field(column)])
    fd, name = tempfile.mkstemp(prefix=".text-", suffix=".arrow", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f, pa.ipc.new_file(f, schema) as out:
            for chunk in values.chunks:
                out.write_batch(pa.record_batch([chunk], schema=schema))
        mapped = pa.ipc.open_file(pa.memory_map(name)).read_all()[column]
    finally:
        os.unlink(name)  # the mapping keeps the pages; nothing is left if the run is killed
    return table.set_column(table.schema.get_field_index(column), column, mapped)
