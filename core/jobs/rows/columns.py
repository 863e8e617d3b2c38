"""Which manifest column holds each field qtts reads (the field's own name, or the one
--id-column, --text-column or --column gave), and which Arrow types a field accepts. A column
named like a missing field (`speakr`) gets a warning: its values would be ignored without a word.
Knows names and Arrow types; reads no file."""

from __future__ import annotations

import difflib
import logging
import re

import pyarrow as pa

from qtts.core.errors import ManifestError
from qtts.core.jobs.contract.spec import OPTIONAL_FIELDS, REQUIRED_FIELDS, ManifestColumns

log = logging.getLogger("qtts")
# difflib's ratio past which a column's name is a missing field's misspelling ("speakr": 0.92).
TYPO_CUTOFF = 0.8
# The kinds of Arrow type each field accepts ("null": a column with no value in it).
ACCEPTS = {"id": ("text", "integer", "null"), "seed": ("integer", "floating", "null")}
TEXT_ONLY = ("text", "null")


def type_kind(t: pa.DataType) -> str:
    """text, integer, floating, null, or the type's name (int32 and int64 are one kind)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    view = getattr(pa.types, "is_string_view", None)  # pyarrow 16 and later
    if pa.types.is_string(t) or pa.types.is_large_string(t) or (view is not None and view(t)):
        return "text"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t):
        return "floating"
    if pa.types.is_null(t):
        return "null"
    return str(t)


def accepts(name: str, t: pa.DataType) -> bool:
    return type_kind(t) in ACCEPTS.get(name, TEXT_ONLY)


def label(name: str, columns: ManifestColumns) -> str:
    """A field as errors name it: 'text', or 'sentence' (--text-column sentence)."""
    flag = columns.flag(name)
    return repr(name) if flag is None else f"{columns.column(name)!r} ({flag})"


def pick_columns(
    names: list[str], columns: ManifestColumns, where: str, wanted: tuple[str, ...] | None = None
) -> dict[str, str]:
    """field -> the column that holds it, for each wanted field the manifest has (`names`: its
    columns). Refuses a missing required field (wanted or not) or a missing mapped one."""
    wanted = (*REQUIRED_FIELDS, *OPTIONAL_FIELDS) if wanted is None else wanted
    mapped = [f for f in columns.renamed if f in wanted and f not in REQUIRED_FIELDS]
    missing = [f for f in (*REQUIRED_FIELDS, *mapped) if columns.column(f) not in names]
    has = ", ".join(names) or "none"
    flagged = [f for f in missing if columns.flag(f) is not None]
    if flagged:
        first = flagged[0]
        raise ManifestError(
            f"manifest {where}: no column {columns.column(first)!r} ({columns.flag(first)}); "
            f"its columns: {has}"
        )
    if missing:
        raise ManifestError(
            f"manifest {where}: missing required column(s) {', '.join(missing)} (has: {has})"
        )
    picked = {f: columns.column(f) for f in wanted if columns.column(f) in names}
    _warn_misspelled(names, columns, where, [f for f in wanted if f not in picked])
    return picked


def _warn_misspelled(
    names: list[str], columns: ManifestColumns, where: str, absent: list[str]
) -> None:
    """A warning per column that looks like a missing field: its values are not read."""
    used = {columns.column(f) for f in (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)}
    wanted = {columns.column(f).lower(): columns.column(f) for f in absent}
    for name in (n for n in names if n not in used):
        # a field's name as one word of the column's (speaker_id, src_language): another
        # column of its own, not a misspelling
        words = set(re.split(r"[_\-\s.]+", name.lower()))
        candidates = [w for w in wanted if w not in words or w == name.lower()]
        close = difflib.get_close_matches(name.lower(), candidates, n=1, cutoff=TYPO_CUTOFF)
        if close:
            column = wanted[close[0]]
            field = next(f for f in absent if columns.column(f) == column)
            log.warning(
                f"manifest {where}: column {name!r} is not one qtts reads, so its values are "
                f"ignored; did you mean {column!r}? (rename it, or pass --column {field}={name})"
            )
