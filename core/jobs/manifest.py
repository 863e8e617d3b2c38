"""Rows in: a UTF-8 text file (one utterance per non-empty line, `-` = stdin) or a Parquet manifest.

Owns the input contract of DESIGN.md: column names and types, 1-based row numbers, output ids, id
safety, and the whole-manifest refusals (unreadable input, invalid UTF-8, missing columns, duplicate
ids, two rows writing the same file) raised as ManifestError (exit 2, nothing synthesized).
Per-row problems are not raised here; qtts.core.jobs.validation turns them into failed rows.
Knows nothing of models, tensors or output files beyond the id -> file-name rule.
"""

from __future__ import annotations

import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REQUIRED_COLUMNS = ("id", "text")
OPTIONAL_COLUMNS = ("speaker", "language", "instruct", "ref_audio", "ref_text", "seed")
MAX_ID_BYTES = 200  # leaves room for ".codes.npy" and a temp suffix under the 255-byte name limit


class ManifestError(ValueError):
    """The input as a whole cannot be used (exit 2): nothing is synthesized."""


@dataclass(frozen=True)
class InputRow:
    """One row as read, before validation. Optional fields are None when absent or null."""

    row: int  # 1-based manifest row, or 1-based line number (blank lines counted)
    id: str | None
    text: str | None
    speaker: str | None = None
    language: str | None = None
    instruct: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    seed: Any = None  # int, None, or whatever the manifest held (validation rejects non-ints)


def read_text_lines(source: str, *, max_bad_lines: int = 5) -> list[InputRow]:
    """One row per non-blank line; id = 1-based line number as 6 digits. `-` reads stdin."""
    name = "stdin" if source == "-" else source
    if source == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as e:
            raise ManifestError(f"cannot read {source}: {e.strerror or e}") from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # a final newline does not start another line
    rows: list[InputRow] = []
    bad: list[str] = []
    for n, raw in enumerate(lines, start=1):
        raw = raw.removesuffix(b"\r")
        if n == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # UTF-8 byte-order mark
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad.append(f"line {n} (byte {e.start + 1})")
            if len(bad) >= max_bad_lines:
                break
            continue
        if text.strip():
            rows.append(InputRow(row=n, id=f"{n:06d}", text=text))
    if bad:
        raise ManifestError(f"{name}: invalid UTF-8 at " + ", ".join(bad))
    return rows


def read_parquet_manifest(path: str) -> list[InputRow]:
    """Rows of a Parquet manifest; a missing optional column or a null takes the CLI default."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise ManifestError(f"cannot read manifest {path}: {_first_line(e)}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise ManifestError(
            f"manifest {path}: missing required column(s) {', '.join(missing)} "
            f"(has: {', '.join(table.column_names) or 'none'})"
        )
    columns: dict[str, list[Any]] = {}
    for name in REQUIRED_COLUMNS + OPTIONAL_COLUMNS:
        if name in table.column_names:
            columns[name] = _column_values(path, name, table.column(name))
    rows = []
    for i in range(table.num_rows):
        fields = {k: v[i] for k, v in columns.items()}
        rows.append(InputRow(row=i + 1, **fields))
    return rows


def _column_values(path: str, name: str, column) -> list[Any]:
    import pyarrow as pa

    t = column.type
    if name == "seed":
        ok = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)
        if not ok:
            raise ManifestError(f"manifest {path}: column 'seed' must be integers, got {t}")
        return column.to_pylist()
    if name == "id" and pa.types.is_integer(t):
        return [None if v is None else str(v) for v in column.to_pylist()]
    is_text = pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)
    if not is_text and hasattr(pa.types, "is_string_view"):
        is_text = pa.types.is_string_view(t)
    if not is_text:
        raise ManifestError(f"manifest {path}: column {name!r} must be strings, got {t}")
    values = column.to_pylist()
    if name in ("id", "text"):
        return values
    # An empty optional cell means "not given": it takes the command-line default.
    return [v if v is not None and v.strip() else None for v in values]


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


def file_key(row_id: str) -> str:
    """Two ids with the same key would write the same file on some filesystem (case, NFC/NFD)."""
    return unicodedata.normalize("NFC", row_id).casefold()


def check_unique_ids(rows: list[InputRow], *, max_listed: int = 5) -> None:
    """Refuse the whole manifest when two rows share an id or would write the same file."""
    first: dict[str, InputRow] = {}
    clashes: list[str] = []
    for r in rows:
        if r.id is None:
            continue
        key = file_key(r.id)
        prev = first.setdefault(key, r)
        if prev is r:
            continue
        if prev.id == r.id:
            clashes.append(f"duplicate id {r.id!r} (rows {prev.row} and {r.row})")
        else:
            clashes.append(
                f"ids {prev.id!r} (row {prev.row}) and {r.id!r} (row {r.row}) "
                "would write the same file"
            )
    if clashes:
        more = f" and {len(clashes) - max_listed} more" if len(clashes) > max_listed else ""
        raise ManifestError(
            "refusing the manifest, nothing was done: " + "; ".join(clashes[:max_listed]) + more
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
