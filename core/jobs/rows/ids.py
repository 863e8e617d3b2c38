"""Row ids as output file names: which ids are unsafe (id_problem, the rules written once), and
which name the same file. Over a manifest a vectorized screen picks the ids that might break a
rule and only those go through id_problem; a test ties the screen to the rules. Knows strings."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_ID_BYTES = 200  # leaves room for ".codes.npy" and a temp suffix under the 255-byte name limit
# Characters a safe id never holds: control characters (Unicode Cc), path separators.
_NEVER = r"[\x00-\x1f\x7f-\x9f/\\]"
_BLANK_OR_EMPTY = r"^[\s\p{Z}]*$"  # Python's other whitespace is Cc, caught by _NEVER


def id_problem(row_id: str | None) -> str | None:
    """Why `row_id` cannot name an output file inside the out dir, or None when it is safe."""
    if row_id is None:
        return "id is null"
    if row_id == "" or not row_id.strip():
        return "id is empty"
    if "\x00" in row_id:
        return "id contains a NUL character"
    if "/" in row_id or "\\" in row_id:
        return f"unsafe id {row_id!r}: contains a path separator"
    if row_id.startswith("."):
        return f"unsafe id {row_id!r}: starts with a dot ('..' or a hidden file)"
    if Path(row_id).is_absolute() or (len(row_id) > 1 and row_id[1] == ":"):
        return f"unsafe id {row_id!r}: absolute path"
    if any(unicodedata.category(c) == "Cc" for c in row_id):
        return f"unsafe id {row_id!r}: contains a control character"
    if len(row_id.encode("utf-8")) > MAX_ID_BYTES:
        return f"id too long ({len(row_id.encode('utf-8'))} bytes; at most {MAX_ID_BYTES})"
    return None


def blank_ids(ids: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """True for every empty or blank id (id_problem's "id is empty"; null stays null)."""
    return pc.match_substring_regex(ids, _BLANK_OR_EMPTY)


def unsafe_id_candidates(ids: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """True for every id id_problem might refuse (a superset: it decides)."""
    suspicious = [
        pc.is_null(ids),
        pc.match_substring_regex(ids, _NEVER),
        blank_ids(ids),
        pc.starts_with(ids, "."),
        pc.equal(pc.utf8_slice_codeunits(ids, 1, 2), ":"),
        pc.greater(pc.binary_length(ids), MAX_ID_BYTES),
    ]
    out = suspicious[0]
    for mask in suspicious[1:]:
        out = pc.or_kleene(out, pc.fill_null(mask, True))
    return out


def id_errors(ids: pa.Array) -> pa.Array:
    """One reason per id (null where the id is safe)."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    candidates = np.flatnonzero(unsafe_id_candidates(ids).to_numpy(zero_copy_only=False))
    reasons = [id_problem(v) for v in ids.take(candidates).to_pylist()]
    return patched(pa.nulls(len(ids), pa.string()), candidates, reasons)


def patched(array: pa.Array, indices: np.ndarray, values: list) -> pa.Array:
    """`array` with array[indices[k]] = values[k]: a few Python values into a long column."""
    if len(indices) == 0:
        return array
    mask = np.zeros(len(array), dtype=bool)
    mask[indices] = True
    return pc.replace_with_mask(array, pa.array(mask), pa.array(values, array.type))


def file_key(row_id: str) -> str:
    """Two ids with the same key would write the same file on some filesystem (case, NFC/NFD)."""
    return unicodedata.normalize("NFC", row_id).casefold()


def file_keys(ids: pa.ChunkedArray) -> pa.Array:
    """file_key of every id (null for null): ASCII ids vectorized, the rest one by one."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    other = np.flatnonzero(~pc.fill_null(pc.string_is_ascii(ids), True).to_numpy(False))
    values = [None if v is None else file_key(v) for v in ids.take(other).to_pylist()]
    return patched(pc.ascii_lower(ids), other, values)
