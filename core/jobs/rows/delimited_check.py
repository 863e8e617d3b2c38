"""The strict row scan of a CSV or TSV manifest: what pyarrow's reader forgives or cannot place,
said with the line.

pyarrow reads a quoted field that is never closed as one field running to the end of the file
(every later row swallowed into one row's text), and silently drops a quote that opens a field
holding more text after its close (`"Stop," he said`). Python's csv module in strict mode refuses
both. So every CSV is scanned once more by it after pyarrow has read it (about 1 s a million
rows on a 2-core VM), and its row count must be pyarrow's. A file pyarrow refuses (a ragged
row, invalid UTF-8) is scanned too, to name the line instead of pyarrow's column number.
Lines are the file's physical lines, counted from 1 with the header; a row spanning lines is
named by its first. Knows the formats; no row semantics.
"""

from __future__ import annotations

import csv
from pathlib import Path

from qtts.core.errors import ManifestError
from qtts.core.jobs.rows.file_lines import numbered_lines

_NEVER_CLOSED = "unexpected end of data"


def check_csv_rows(
    path: Path, where: str, *, tsv: bool, rows: int | None = None, refused: str | None = None
) -> None:
    """Raise ManifestError naming the first line that is not a well-formed row, or, when
    `rows` (pyarrow's count) is given, when the file holds another number of rows. refused:
    pyarrow's error when it refused the file; invalid UTF-8 is named only when that is why
    (columns qtts does not read may hold any bytes). A file that cannot be opened or scanned
    here raises nothing: the caller's own error says so."""
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
