"""PATH/scores.parquet: one row per audio file of the dataset, its scores, who made them, and why
a file could not be scored; and the resume rule over it.

Columns: `id` (a qtts out dir only), `file_name`, `stamp` (the audio as it was when scored:
qtts.core.quality.dataset), the score values (qtts.core.jobs.output.score_columns.SCORE_FIELDS),
each scorer's identity (`dnsmos_scorer`, `asr_scorer`, `speaker_scorer`: the model and settings
that made its values)
and `error` (the last attempt's one-line reason, null when it scored). A row keeps its old
scores while its stamp is unchanged; a row whose audio changed loses all of them (stale), and a
file no longer in the dataset leaves the table. A scorer skips a row it scored with the same
identity. Columnar: no Python object per row. Knows columns and one file; no audio, no models.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.errors import UsageError
from qtts.core.jobs.output.results import SCORE_FIELDS
from qtts.core.jobs.state.atomic_files import atomic_write
from qtts.core.model.hub import one_line

SCORER_COLUMNS = {"dnsmos": "dnsmos_scorer", "asr": "asr_scorer", "speaker": "speaker_scorer"}
# What a row carries besides its key and stamp: kept while the stamp holds.
CARRIED = pa.schema(
    [
        *SCORE_FIELDS,
        *(pa.field(c, pa.string()) for c in SCORER_COLUMNS.values()),
        pa.field("error", pa.string()),
    ]
)


def read_scores(path: Path) -> pa.Table | None:
    """The scores file, or None when there is none; a unreadable one is a usage error."""
    if not path.exists():
        return None
    try:
        return pq.read_table(path).combine_chunks()
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(
            f"cannot read {path} ({one_line(exc)}): move it away to score afresh"
        ) from None


def current(rows: pa.Table, old: pa.Table | None, key: str) -> pa.Table:
    """rows' key(s), file_name and stamp, with the old scores of each row whose stamp is
    unchanged (null otherwise: stale, new, or its file missing)."""
    keys = ["id", "file_name"] if key == "id" else ["file_name"]
    table = rows.select([*keys, "stamp"])
    n = table.num_rows
    same, at = np.zeros(n, dtype=bool), None
    if old is not None and key in old.column_names and "stamp" in old.column_names:
        at = pc.index_in(rows[key], value_set=old[key])
        same = pc.fill_null(pc.equal(old["stamp"].take(at), rows["stamp"]), False)
        same = same.to_numpy(zero_copy_only=False)
    for field in CARRIED:
        if old is not None and field.name in old.column_names and same.any():
            values = old[field.name].take(at).cast(field.type)
            column = pc.if_else(pa.array(same), values, pa.nulls(n, field.type))
        else:
            column = pa.nulls(n, field.type)
        table = table.append_column(field, column)
    return table


def needs(table: pa.Table, scorer: str, identity: str, done: str) -> np.ndarray:
    """Rows `scorer` must score: not scored by this identity, or without a value."""
    scored = pc.and_(pc.equal(table[SCORER_COLUMNS[scorer]], identity), pc.is_valid(table[done]))
    return ~pc.fill_null(scored, False).to_numpy(zero_copy_only=False)


def scatter(table: pa.Table, updates: dict[str, tuple[list[int], list]]) -> pa.Table:
    """table with each column's new values written at their rows: updates[column] = (row
    positions, values); the last write of a row wins. One take per column."""
    for name, (positions, values) in updates.items():
        if not positions:
            continue
        field = table.schema.field(name)
        old = table[name].combine_chunks()
        index = np.arange(table.num_rows)
        index[positions] = table.num_rows + np.arange(len(positions))
        merged = pa.concat_arrays([old, pa.array(values, field.type)]).take(pa.array(index))
        table = table.set_column(table.schema.get_field_index(name), field, merged)
    return table


def write_scores(path: Path, table: pa.Table) -> None:
    atomic_write(path, lambda f: pq.write_table(table, f, compression="zstd"))
