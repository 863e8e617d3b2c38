"""Rows in: a UTF-8 text file (a row a non-blank line, `-` = stdin) or a manifest, read into one
Arrow table (ROW_SCHEMA), never a Python object a row: Parquet parts as one dataset (their columns
checked to agree from the footers first), JSON Lines and CSV/TSV by line_formats. Owns the input
contract and its whole-input refusals (ManifestError, exit 2); per-row problems are validation's.
Knows nothing of models, tensors or output files beyond the id -> file-name rule."""

from __future__ import annotations

import sys
from contextlib import suppress
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import ManifestError
from qtts.core.jobs.contract.spec import OPTIONAL_FIELDS, REQUIRED_FIELDS, ManifestColumns
from qtts.core.jobs.rows.columns import accepts, label, pick_columns, type_kind
from qtts.core.jobs.rows.ids import blank_ids, file_keys
from qtts.core.jobs.rows.line_formats import (
    UTF8_BOM,
    read_delimited_rows,
    read_jsonl_rows,
    refuse_wide_text,
)
from qtts.core.jobs.rows.sources import ManifestSource, find_manifest, unreadable

STRING_COLUMNS = ("id", "text", "speaker", "language", "instruct", "ref_audio", "ref_text", "voice")
# What every reader returns; seed stays as the manifest typed it (validation checks it). Text is
# a large_string: a dataset's texts pass 2 GiB, past a plain string column's 32-bit offsets.
ROW_SCHEMA = pa.schema(
    [("row", pa.int64())]
    + [(c, pa.large_string() if c == "text" else pa.string()) for c in STRING_COLUMNS]
    + [("seed", pa.float64())]
)
# Python's str.isspace() set, as an RE2 class (\s is ASCII-only in RE2; \p{Z} adds the rest).
BLANK = r"^[\s\p{Z}\x0b\x1c-\x1f\x85]*$"
CHECK_SLICE = 65536  # lines per UTF-8 check (a bad line is looked for only in failing slices)


def read_text_lines(source: str, *, max_bad_lines: int = 5) -> pa.Table:
    """One row per non-blank line; id = 1-based line number as 6 digits. `-` reads stdin."""
    name = "stdin" if source == "-" else source
    if source == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as e:
            raise ManifestError(f"cannot read {source}: {e.strerror or e}") from None
    refuse_wide_text(data, name)
    data = data.removeprefix(UTF8_BOM)
    if data and not data.endswith(b"\n"):
        data += b"\n"  # every line now ends with "\n", so one slice removes it from all
    lines = _split_lines(data)
    text = _decode_utf8(lines, name, max_bad_lines)
    row = pa.array(np.arange(1, len(text) + 1, dtype=np.int64))
    keep = pc.invert(pc.match_substring_regex(text, BLANK))
    table = pa.table({"row": row, "text": text}).filter(keep)
    ids = pc.utf8_lpad(pc.cast(table["row"], pa.string()), 6, "0")
    return _with_schema(table.append_column("id", ids))


def _split_lines(data: bytes) -> pa.Array:
    """Lines as a zero-copy binary array, "\\n" and one "\\r" before it removed."""
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10) + 1
    offsets = np.concatenate([[0], ends]).astype(np.int64)
    raw = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    raw = pc.binary_slice(raw, 0, -1)
    return pc.if_else(pc.ends_with(raw, b"\r"), pc.binary_slice(raw, 0, -1), raw)


def _decode_utf8(lines: pa.Array, name: str, max_bad: int) -> pa.Array:
    with suppress(pa.ArrowInvalid):
        return lines.cast(pa.large_string())
    bad: list[str] = []
    for start in range(0, len(lines), CHECK_SLICE):
        part = lines.slice(start, CHECK_SLICE)
        with suppress(pa.ArrowInvalid):
            part.cast(pa.large_string())
            continue
        for i, raw in enumerate(part.to_pylist(), start=start + 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad.append(f"line {i} (byte {e.start + 1})")
                if len(bad) >= max_bad:
                    raise ManifestError(f"{name}: invalid UTF-8 at " + ", ".join(bad)) from None
    raise ManifestError(f"{name}: invalid UTF-8 at " + ", ".join(bad))


def read_manifest(
    source: str | ManifestSource,
    columns: ManifestColumns | None = None,
    fields: tuple[str, ...] | None = None,
    *,
    text_if_null_id: bool = False,
) -> pa.Table:
    """Rows of a manifest; a missing optional column, a null or a blank optional string takes
    the CLI default. Only the fields in `fields` are read (text_if_null_id: text too, when some id
    is null); `columns`: where each field is."""
    source = find_manifest(source) if isinstance(source, str) else source
    columns = columns or ManifestColumns()
    if source.kind == "parquet":
        table = _read_parquet(source, columns, fields, text_if_null_id=text_if_null_id)
    else:
        if text_if_null_id and fields is not None and "text" not in fields:
            fields = (*fields, "text")  # a line format reads text at the cost of one column
        read = read_jsonl_rows if source.kind == "jsonl" else read_delimited_rows
        table = read(source, columns, fields)
    out = {"row": pa.array(np.arange(1, table.num_rows + 1, dtype=np.int64))}
    for name in table.column_names:
        out[name] = _column(source.given, label(name, columns), name, table.column(name))
    return _with_schema(pa.table(out))


WIDE = {"integer": pa.int64(), "floating": pa.float64(), "null": pa.null()}


def _read_parquet(
    source: ManifestSource,
    columns: ManifestColumns,
    wanted: tuple[str, ...] | None = None,
    *,
    text_if_null_id: bool = False,
) -> pa.Table:
    """The wanted fields the manifest has, a column each under the field's name."""
    schemas = [_schema(source, part) for part in source.files]
    fields = pick_columns(schemas[0].names, columns, _where(source, 0), wanted)
    _same_columns(source, schemas, columns, fields, wanted)
    table = _read(source, schemas, columns, fields)
    if text_if_null_id and "id" in fields and table["id"].null_count and "text" not in fields:
        text = pick_columns(schemas[0].names, columns, _where(source, 0), ("text",))
        if text:
            table = table.append_column("text", _read(source, schemas, columns, text)["text"])
    return table


def _schema(source: ManifestSource, part: Path) -> pa.Schema:
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(part)
    except FileNotFoundError:
        raise ManifestError(f"cannot read manifest {source.name(part)}: no such file") from None
    except (OSError, pa.ArrowException) as e:
        raise unreadable(source.name(part), e) from None


def _where(source: ManifestSource, index: int) -> str:
    part = source.name(source.files[index])
    return f"{source.given} (part {part})" if source.is_dataset else source.given


def _same_columns(
    source: ManifestSource,
    schemas: list[pa.Schema],
    columns: ManifestColumns,
    fields: dict[str, str],
    wanted: tuple[str, ...] | None,
) -> None:
    """Every part has the columns qtts reads from the first part, and no other it would read."""
    read = set(fields.values())
    readable = {columns.column(f) for f in wanted or (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)}
    first = source.name(source.files[0])
    for part, schema in zip(source.files[1:], schemas[1:], strict=True):
        names = set(schema.names)
        lacks, extra = sorted(read - names), sorted((names & readable) - read)
        if lacks or extra:
            differs = (
                f"has no column {lacks[0]!r}, which part {first} has"
                if lacks
                else f"has a column {extra[0]!r} that part {first} lacks"
            )
            raise ManifestError(
                f"manifest {source.given}: part {source.name(part)} {differs} (parts must share "
                "the columns qtts reads)"
            )


def _read(
    source: ManifestSource,
    schemas: list[pa.Schema],
    columns: ManifestColumns,
    fields: dict[str, str],
) -> pa.Table:
    """The fields' columns at their widest type over the parts, in the parts' order."""
    import pyarrow.dataset as ds

    wide = {c: _wide_type(source, schemas, columns, f, c) for f, c in fields.items()}
    try:
        dataset = ds.dataset([str(p) for p in source.files], schema=pa.schema(list(wide.items())))
        table = dataset.to_table(columns=list(wide))
    except (OSError, pa.ArrowException) as e:
        raise unreadable(source.given, e) from None
    return pa.table({name: table[column] for name, column in fields.items()})


def _wide_type(
    source: ManifestSource,
    schemas: list[pa.Schema],
    columns: ManifestColumns,
    name: str,
    column: str,
) -> pa.DataType:
    """One kind of type over every part (refused otherwise), as the type the parts widen to."""
    seen: int | None = None  # the first part with values in the column
    for i, schema in enumerate(schemas):
        t = schema.field(column).type
        if not accepts(name, t):
            must = "integers" if name == "seed" else "strings"
            raise ManifestError(
                f"manifest {_where(source, i)}: column {label(name, columns)} must be {must}, "
                f"got {t}"
            )
        if type_kind(t) == "null":
            continue
        if seen is None:
            seen = i
        elif type_kind(t) != type_kind(schemas[seen].field(column).type):
            raise ManifestError(
                f"manifest {source.given}: part {source.name(source.files[i])} has column "
                f"{column!r} as {t}, part {source.name(source.files[seen])} as "
                f"{schemas[seen].field(column).type} (parts must share a schema)"
            )
    kind = "null" if seen is None else type_kind(schemas[seen].field(column).type)
    if kind == "text":
        return pa.large_string() if name == "text" else pa.string()
    return WIDE[kind]


def _column(where: str, named: str, name: str, column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Field `name`'s column as ROW_SCHEMA has it (named: how errors name the column)."""
    t = column.type
    if name == "seed":
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)):
            raise ManifestError(f"manifest {where}: column {named} must be integers, got {t}")
        return column  # validation checks range and integrality, per row
    if name == "id" and pa.types.is_integer(t):
        return pc.cast(column, pa.string())
    if pa.types.is_dictionary(t):  # a categorical column (pandas, Polars): its values
        column, t = pc.cast(column, t.value_type), t.value_type
    if type_kind(t) not in ("text", "null"):
        raise ManifestError(f"manifest {where}: column {named} must be strings, got {t}")
    column = pc.cast(column, ROW_SCHEMA.field(name).type)
    if name in ("id", "text"):
        return column
    # An empty optional cell means "not given": it takes the command-line default.
    return pc.if_else(pc.match_substring_regex(column, BLANK), None, column)


def _with_schema(table: pa.Table) -> pa.Table:
    """Every ROW_SCHEMA column in order, absent ones null; an integer seed keeps its type (a
    float64 would round seeds above 2**53)."""
    columns = []
    for f in ROW_SCHEMA:
        col = table[f.name] if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        typed_seed = f.name == "seed" and not pa.types.is_null(col.type)
        columns.append(col if typed_seed else col.cast(f.type))
    return pa.Table.from_arrays(columns, names=ROW_SCHEMA.names)


def check_unique_ids(rows: pa.Table, *, max_listed: int = 5) -> None:
    """Refuse the input if two rows share an id or a file; blank ids fail alone, as null ones."""
    ids = rows["id"]
    keys = file_keys(ids)
    keys = pc.if_else(pc.fill_null(blank_ids(ids), False), pa.scalar(None, keys.type), keys)
    counts = pc.value_counts(keys.drop_null())
    repeated = counts.filter(pc.greater(counts.field("counts"), 1)).field("values")
    if len(repeated) == 0:
        return
    clash = pc.is_in(keys, value_set=repeated)
    hits = rows.select(["row", "id"]).append_column("key", keys).filter(clash).to_pylist()
    first: dict[str, dict] = {}
    messages: list[str] = []
    for r in sorted(hits, key=lambda r: r["row"]):
        prev = first.setdefault(r["key"], r)
        if prev is r:
            continue
        if prev["id"] == r["id"]:
            messages.append(f"duplicate id {r['id']!r} (rows {prev['row']} and {r['row']})")
        else:
            messages.append(
                f"ids {prev['id']!r} (row {prev['row']}) and {r['id']!r} (row {r['row']}) "
                "would write the same file"
            )
    more = f" and {len(messages) - max_listed} more" if len(messages) > max_listed else ""
    raise ManifestError(
        "refusing the manifest, nothing was done: " + "; ".join(messages[:max_listed]) + more
    )
