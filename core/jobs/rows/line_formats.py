"""JSON Lines and CSV/TSV manifests, read by pyarrow's readers into the columns qtts reads, under
the fields' names. A row's number is its place in the file; strings stay strings (a CSV id "007"
is not 7); JSON Lines types id and seed as the first row gives them. A refusal names the file and
the line, found by a scan that runs only when pyarrow refuses, but for CSV: pyarrow reads a quoted
field never closed as one field to the end of the file and drops a quote that opens a field with
text after its close, so every CSV is scanned by Python's strict csv reader too, and its row
count must be pyarrow's. Also a file's physical lines, numbered from 1 as refusals name them, and
the refusal of UTF-16 or UTF-32 text before a reader misreads its NUL bytes. Knows the formats;
no row semantics."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from qtts.core.errors import ManifestError
from qtts.core.jobs.contract.spec import OPTIONAL_FIELDS, REQUIRED_FIELDS, ManifestColumns
from qtts.core.jobs.rows.columns import pick_columns
from qtts.core.jobs.rows.sources import ManifestSource, unreadable

INT64 = (-(2**63), 2**63)
JSON_TYPES = {str: "a string", int: "an integer", float: "a number", bool: "true/false",
              list: "a list", dict: "an object"}  # fmt: skip

UTF8_BOM = b"\xef\xbb\xbf"
# The UTF-32 marks first: UTF-32LE's begins with UTF-16LE's.
WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
HEAD_BYTES = 4096  # what the encoding is judged on


def numbered_lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    for number, line in enumerate(f, start=1):
        yield number, line.removeprefix(UTF8_BOM) if number == 1 else line


def refuse_wide_text(head: bytes, where: str) -> None:
    """A ManifestError naming the encoding, for UTF-16 or UTF-32 text: by its byte-order mark, or
    guessed when a quarter of the head is NUL bytes (such text without a mark, mostly in scripts
    below U+0100; Chinese in UTF-16 has few NULs and is left to the UTF-8 check)."""
    head = head[:HEAD_BYTES]
    name = next((name for bom, name in WIDE_BOMS if head.startswith(bom)), None)
    nuls = head.count(0) * 4
    if name is None and len(head) >= 2 and nuls >= len(head):
        name = "UTF-16" if nuls < len(head) * 3 else "UTF-32"
    if name is not None:
        raise ManifestError(
            f"{where} is not UTF-8: it looks like {name} text; qtts reads UTF-8 (convert it, "
            f"for example: iconv -f {name} -t UTF-8 IN > OUT)"
        )


def refuse_wide_file(path: Path, where: str) -> None:
    """refuse_wide_text on a file's head; a file that cannot be opened is its reader's to name."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return
    refuse_wide_text(head, where)


def read_delimited_rows(
    source: ManifestSource, columns: ManifestColumns, wanted: tuple[str, ...] | None = None
) -> pa.Table:
    """A CSV or TSV manifest's wanted fields (the header names the columns)."""
    import pyarrow.csv as csv

    path, where = source.files[0], source.given
    refuse_wide_file(path, f"manifest {where}")
    tsv = source.kind == "tsv"
    parse = csv.ParseOptions(
        delimiter="\t" if tsv else ",", quote_char=False if tsv else '"', newlines_in_values=not tsv
    )
    try:
        with csv.open_csv(path, parse_options=parse) as reader:  # the header: one block read
            names = reader.schema.names
    except FileNotFoundError:
        raise ManifestError(f"cannot read manifest {where}: no such file") from None
    except (OSError, pa.ArrowException) as e:
        if "Empty CSV file" not in str(e):
            check_csv_rows(path, where, tsv=tsv, refused=str(e))  # the line at fault, if any
            raise unreadable(where, e) from None
        return no_rows(wanted)  # not even a header: no rows, whatever the columns
    fields = pick_columns(names, columns, where, wanted)
    kept = list(dict.fromkeys(fields.values()))
    types = {c: _arrow_type(f) for f, c in fields.items() if f != "seed"}
    convert = csv.ConvertOptions(include_columns=kept, column_types=types)
    try:
        table = csv.read_csv(path, parse_options=parse, convert_options=convert)
    except (OSError, pa.ArrowException) as e:
        check_csv_rows(path, where, tsv=tsv, refused=str(e))  # the line, where one is at fault
        raise unreadable(where, e) from None
    if not tsv:  # what pyarrow forgives in quoting (check_csv_rows)
        check_csv_rows(path, where, tsv=False, rows=table.num_rows)
    return pa.table({name: table[column] for name, column in fields.items()})


def read_jsonl_rows(
    source: ManifestSource, columns: ManifestColumns, wanted: tuple[str, ...] | None = None
) -> pa.Table:
    """A JSON Lines manifest's wanted fields; a field no row has counts as missing."""
    import pyarrow.json as pj

    path, where = source.files[0], source.given
    refuse_wide_file(path, f"manifest {where}")
    try:
        first = _first_json_row(path, where)
    except FileNotFoundError:
        raise ManifestError(f"cannot read manifest {where}: no such file") from None
    except OSError as e:
        raise unreadable(where, e) from None
    if first is None:  # no row: no rows, whatever the columns
        return no_rows(wanted)
    every = (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)
    # Read every wanted field's column; which exist: the first row's keys, and any column a
    # later row fills (pyarrow leaves out the rest, so they cannot be listed).
    fields = {f: columns.column(f) for f in wanted or every}
    types = {c: _json_type(f, first.get(c)) for f, c in fields.items()}
    schema = pa.schema(list(types.items()))
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(path, parse_options=options)
        table.validate(full=True)  # pyarrow's JSON reader leaves invalid UTF-8 in strings
    except (OSError, pa.ArrowException) as e:
        raise _bad_line(path, where, types, fields.get("id")) or unreadable(where, e) from None
    present = [*first, *(c for c in types if c not in first and table[c].null_count < len(table))]
    picked = pick_columns(present, columns, where, wanted)
    return pa.table({name: table[column] for name, column in picked.items()})


def no_rows(wanted: tuple[str, ...] | None) -> pa.Table:
    return pa.table({f: pa.nulls(0, _arrow_type(f)) for f in wanted or REQUIRED_FIELDS})


def _arrow_type(name: str) -> pa.DataType:
    return pa.large_string() if name == "text" else pa.string()


def _json_type(name: str, value: object) -> pa.DataType:
    """A field's type, from its value in the first row (strings when it has none there)."""
    if name == "seed":
        return pa.float64() if isinstance(value, float) else pa.int64()
    if name == "id" and isinstance(value, int) and not isinstance(value, bool):
        return pa.int64()
    return _arrow_type(name)


def _first_json_row(path: Path, where: str) -> dict | None:
    with path.open("rb") as f:  # a minified JSON array is one huge line: refused before reading it
        head = f.read(1 << 16).removeprefix(UTF8_BOM).lstrip()
        if head and not head.startswith(b"{"):
            raise ManifestError(f"{where} line 1: not a JSON object (one object per line)")
        f.seek(0)
        for number, line in numbered_lines(f):
            if line.strip():
                row = _json_row(line, number, where)
                if isinstance(row, str):
                    raise ManifestError(row)
                return row
    return None


def _json_row(line: bytes, number: int, where: str) -> dict | str:
    """The line's object, or why it is none (one line naming the file and the line)."""
    try:
        row = json.loads(line)
    except UnicodeDecodeError:
        return f"manifest {where} line {number}: invalid UTF-8"
    except ValueError as e:
        return f"manifest {where} line {number}: not JSON ({e.args[0].split(':')[0]})"
    if not isinstance(row, dict):
        return f"manifest {where} line {number}: not a JSON object"
    return row


def _bad_line(
    path: Path, where: str, types: dict[str, pa.DataType], id_column: str | None
) -> ManifestError | None:
    """The first line pyarrow refused, and why; None when every line reads."""
    want = {c: _python_types(t) for c, t in types.items()}
    with path.open("rb") as f:
        for number, line in numbered_lines(f):
            if not line.strip():
                continue
            row = _json_row(line, number, where)
            if isinstance(row, str):
                return ManifestError(row)
            for column, value in row.items():
                if column in want and value is not None and type(value) not in want[column]:
                    got = JSON_TYPES.get(type(value), type(value).__name__)
                    hint = " (the first row's type; give every id one, strings are safest)"
                    return ManifestError(
                        f"manifest {where} line {number}: {column!r} is {got}, expected "
                        f"{JSON_TYPES[want[column][0]]}" + hint * (column == id_column)
                    )
                whole = type(value) is int and want.get(column) == (int,)
                if whole and not INT64[0] <= value < INT64[1]:
                    return ManifestError(
                        f"manifest {where} line {number}: {column!r} is {value}, past what a "
                        "64-bit integer holds"
                    )
    return None


def _python_types(t: pa.DataType) -> tuple[type, ...]:
    if pa.types.is_integer(t):
        return (int,)
    if pa.types.is_floating(t):
        return (float, int)
    return (str,)


_NEVER_CLOSED = "unexpected end of data"


def check_csv_rows(
    path: Path, where: str, *, tsv: bool, rows: int | None = None, refused: str | None = None
) -> None:
    """ManifestError naming the first line that is not a well-formed row, or a row count other
    than `rows` (pyarrow's). refused: pyarrow's error, if it refused the file (invalid UTF-8 is
    named only when that is why). A file this scan cannot open raises nothing: its reader will."""
    try:
        found = _count_csv_rows(path, where, tsv)
    except OSError:
        return
    if refused is not None and "UTF8" in refused.replace("-", "").upper():
        line = _bad_utf8_line(path)
        if line:
            raise ManifestError(f"manifest {where} line {line}: invalid UTF-8")
    if rows is not None and found is not None and found != rows:
        raise ManifestError(
            f"manifest {where}: read as {rows} rows, but its lines hold {found}; check its quoting"
        )


def _count_csv_rows(path: Path, where: str, tsv: bool) -> int | None:
    """The rows after the header; None where this reader cannot tell (a NUL before 3.11)."""
    # Long texts (a chapter a row) pass the csv module's 128 KiB default field limit; a C long
    # is 32 bits on Windows.
    csv.field_size_limit(2**31 - 1)
    dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if tsv else {}
    # Bytes that are not UTF-8 pass through: they may sit in a column qtts never reads.
    with path.open(newline="", encoding="utf-8-sig", errors="surrogateescape") as f:
        reader = csv.reader(f, strict=True, **dialect)
        width, rows, start = None, 0, 1
        while True:
            start = reader.line_num + 1
            try:
                fields = next(reader)
            except StopIteration:
                return rows
            except csv.Error as e:
                if "NUL" in str(e):  # Python 3.10's reader refuses NUL; pyarrow does not
                    return None
                raise ManifestError(f"manifest {where} line {start}: {_explained(e)}") from None
            if not fields:  # a blank line: no row, for pyarrow too
                continue
            if width is None:
                width = len(fields)  # the header
                continue
            if len(fields) != width:
                raise ManifestError(
                    f"manifest {where} line {start}: {len(fields)} fields, where the header "
                    f"has {width}"
                )
            rows += 1


def _explained(error: csv.Error) -> str:
    said = str(error)
    if said == _NEVER_CLOSED:
        return "a quoted field opens here and is never closed (quotes inside a field are doubled)"
    if "expected after" in said:
        return (
            "a quote closes a field before its end; quote the whole field and double the quotes "
            'inside it ("""Stop,"" he said")'
        )
    return said


def _bad_utf8_line(path: Path) -> int:
    with path.open("rb") as f:
        for number, line in numbered_lines(f):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 0
