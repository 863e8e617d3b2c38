"""OUT/metadata.jsonl, the Hugging Face AudioFolder metadata: one JSON object per ok row
(file_name, id, text, speaker, language, duration), written from Arrow columns without a Python
object per row. Strings are escaped for JSON by column-wide replaces; the rare value holding a
control character goes through json.dumps. A test checks every line against json.loads.
Knows JSON and columns."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

CONTROL = r"[\x00-\x1f]"


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
        import numpy as np

        at = np.flatnonzero(odd.to_numpy(zero_copy_only=False))
        values = [json.dumps(v, ensure_ascii=False) for v in column.take(at).to_pylist()]
        mask = np.zeros(len(column), dtype=bool)
        mask[at] = True
        quoted = pc.replace_with_mask(quoted, pa.array(mask), pa.array(values, pa.string()))
    return pc.fill_null(quoted, "null")


def json_numbers(column) -> pa.Array:
    return pc.fill_null(pc.cast(column, pa.string()), "null")


def metadata_lines(ok: pa.RecordBatch) -> pa.Array:
    """ok: results rows with file_name, id, text, speaker, language, duration_s."""
    fields = [("file_name", json_strings(ok["file_name"])), ("id", json_strings(ok["id"])),
              ("text", json_strings(ok["text"])), ("speaker", json_strings(ok["speaker"])),
              ("language", json_strings(ok["language"])),
              ("duration", json_numbers(ok["duration_s"]))]  # fmt: skip
    parts = []
    for k, (name, values) in enumerate(fields):
        parts += [pa.scalar(("{" if k == 0 else ", ") + f'"{name}": '), values]
    return pc.binary_join_element_wise(*parts, pa.scalar("}\n"), "")
