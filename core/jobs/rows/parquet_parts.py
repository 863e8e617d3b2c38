"""A Parquet manifest, one file or many parts, read as one dataset in the parts' sorted order:
only the columns qtts reads. Parts must agree on those columns and their kinds (int32 beside int64
is one kind, widened on read), checked from the footers before a row is read. Knows Parquet."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from qtts.core.errors import ManifestError
from qtts.core.jobs.contract.spec import OPTIONAL_FIELDS, REQUIRED_FIELDS, ManifestColumns
from qtts.core.jobs.rows.columns import accepts, label, pick_columns, type_kind
from qtts.core.jobs.rows.sources import ManifestSource, unreadable

WIDE = {"integer": pa.int64(), "floating": pa.float64(), "null": pa.null()}


def read_parquet_rows(
    source: ManifestSource,
    columns: ManifestColumns,
    wanted: tuple[str, ...] | None = None,
    *,
    text_if_null_id: bool = False,
) -> pa.Table:
    """The wanted fields the manifest has, one column each under the field's name
    (text_if_null_id: text too, when some id is null)."""
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
    if not source.is_dataset:
        return source.given
    return f"{source.given} (part {source.name(source.files[index])})"


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
