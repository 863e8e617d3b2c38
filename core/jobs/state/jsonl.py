"""JSON lines from Arrow columns, without a Python object per row: the journal lines of many rows
at once (rows to redo, rows failing validation), and the lines output/results.py writes into
OUT/metadata.jsonl. Strings are escaped for JSON by column-wide replaces; the
rare value holding a control character goes through json.dumps. Tests check every line against
json.loads. Knows JSON and columns."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
