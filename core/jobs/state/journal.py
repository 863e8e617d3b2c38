"""Journals: each writer's append-only JSON lines of the rows finished since the last compaction
(docs/job-state.md, "Records"), read in bulk by Arrow's JSON reader. The lines of many rows at
once (table_lines; also metadata.jsonl's) are built from Arrow columns, no Python object a row.
Knows record lines, JSON and files; no models, no tensors."""

from __future__ import annotations

import io
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.state.records import RECORD_SCHEMA, conform, empty

log = logging.getLogger("qtts")


class Journal:
    """Append-only, fsynced per append, thread-safe (writer threads and the main thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._repaired = False

    def append(self, records: list[dict[str, Any]]) -> None:
        if records:
            lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
            self.append_bytes([lines.encode()])

    def append_table(self, table: pa.Table) -> None:
        """Many records at once (RECORD_SCHEMA columns), as JSON lines built from columns."""
        if table.num_rows:
            self.append_bytes(table_lines(table))

    def append_bytes(self, parts: Iterable[bytes | memoryview]) -> None:
        """Whole lines, appended as one write per part and fsynced once."""
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
            try:
                if not self._repaired:
                    _cut_unfinished_line(fd)
                    self._repaired = True
                for data in parts:
                    view = memoryview(data)
                    while view:  # os.write may write less than asked (large parts)
                        view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError as e:  # a full disk fails os.write, which names no file: say which
                e.filename = e.filename or str(self.path)
                raise
            finally:
                os.close(fd)


def _cut_unfinished_line(fd: int) -> None:
    """Drop the half line a killed writer left at the end (one writer a journal at a time)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    tail = os.pread(fd, min(size, 1 << 20), max(0, size - (1 << 20)))
    keep = size - len(tail) + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
    os.ftruncate(fd, keep)


PIECE_BYTES = 16 << 20  # journal bytes parsed at once: a journal is never in memory whole


def journal_pieces(path: Path, size: int) -> Iterator[pa.Table]:
    """The records of `path`'s first `size` bytes (what a writer appends later is the next
    reader's), PIECE_BYTES of whole lines at a time."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        rest, left, lines = b"", size, 0
        while left > 0:
            chunk = f.read(min(PIECE_BYTES, left))
            if not chunk:
                break
            left -= len(chunk)
            cut = chunk.rfind(b"\n") + 1
            if not cut:  # no line ends in it: kept for the next
                rest += chunk
                continue
            data, rest = rest + chunk[:cut], chunk[cut:]
            if data.strip():
                try:
                    table = _parse(data)
                except pa.ArrowInvalid:  # a damaged line: parse line by line, skipping it
                    table = _parse_lines(path, data, lines)
                yield conform(table)
            lines += data.count(b"\n")


def _parse(data: bytes) -> pa.Table:
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=RECORD_SCHEMA, unexpected_field_behavior="ignore")
    return pj.read_json(io.BytesIO(data), parse_options=options)


def _parse_lines(path: Path, data: bytes, lines: int = 0) -> pa.Table:
    tables = []
    for n, line in enumerate(data.split(b"\n"), start=lines + 1):
        if not line.strip():
            continue
        try:
            if not isinstance(json.loads(line).get("id"), str):
                raise ValueError("no id")
            tables.append(_parse(line + b"\n"))
        except (ValueError, AttributeError, pa.ArrowInvalid):  # JSONDecodeError is a ValueError
            log.warning("journal %s: skipping unreadable line %d", path, n)
    return pa.concat_tables(tables) if tables else empty()


def read_journals(
    paths: list[Path], columns: tuple[str, ...] | None = None
) -> tuple[pa.Table, dict[Path, int]]:
    """Every whole line of `paths` (none of a missing one) as records in order (columns: only
    these), and the bytes read of each."""
    tables, sizes = [], {}
    for path in paths:
        try:
            sizes[path] = path.stat().st_size
        except FileNotFoundError:
            sizes[path] = 0
        tables += [conform(t, columns) for t in journal_pieces(path, sizes[path])]
    return (pa.concat_tables(tables) if tables else conform(empty(), columns)), sizes


CONTROL = r"[\x00-\x1f]"
BATCH = 1 << 16  # rows per batch of lines: a batch's text stays far below 2 GiB


def json_strings(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each value as a JSON string literal ("null" for null), non-ASCII kept as UTF-8."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    column = column.cast(pa.string())
    enc = pc.dictionary_encode(column)
    if len(enc.dictionary) * 4 < len(column):  # a few distinct values (speaker, language)
        return pc.fill_null(json_strings(enc.dictionary).take(enc.indices), "null")
    escaped = pc.replace_substring(pc.replace_substring(column, "\\", "\\\\"), '"', '\\"')
    quoted = pc.binary_join_element_wise(pa.scalar('"'), escaped, pa.scalar('"'), "")
    odd = pc.fill_null(pc.match_substring_regex(column, CONTROL), False)
    if pc.any(odd).as_py():
        at = np.flatnonzero(odd.to_numpy(zero_copy_only=False))
        values = [json.dumps(v, ensure_ascii=False) for v in column.take(at).to_pylist()]
        mask = np.zeros(len(column), dtype=bool)
        mask[at] = True
        quoted = pc.replace_with_mask(quoted, pa.array(mask), pa.array(values, pa.string()))
    return pc.fill_null(quoted, "null")


def json_values(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each value as JSON: strings quoted, numbers and booleans as they print, null as null."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        return json_strings(column)
    if pa.types.is_boolean(t):
        return pc.fill_null(pc.if_else(column, "true", "false"), "null")
    return pc.fill_null(pc.cast(column, pa.string()), "null")  # finite numbers


def json_lines(batch: pa.RecordBatch | pa.Table, names: dict[str, str] | None = None) -> pa.Array:
    """One JSON object per row, "\\n"-terminated; names: column -> key (default: the same)."""
    names = names or {c: c for c in batch.column_names}
    parts: list = []
    for k, (column, key) in enumerate(names.items()):
        parts += [
            pa.scalar(("{" if k == 0 else ", ") + json.dumps(key) + ": "),
            json_values(batch[column]),
        ]
    return pc.binary_join_element_wise(*parts, pa.scalar("}\n"), "")


def lines_bytes(lines: pa.Array) -> memoryview:
    """The bytes of a string array's values, back to back, without a copy."""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    start, end = offsets[lines.offset], offsets[lines.offset + len(lines)]
    return memoryview(lines.buffers()[2])[start:end]


def table_lines(table: pa.Table, names: dict[str, str] | None = None):
    """json_lines of a whole table, a batch at a time (bytes to write)."""
    for batch in table.to_batches(BATCH):
        yield lines_bytes(json_lines(batch, names))
