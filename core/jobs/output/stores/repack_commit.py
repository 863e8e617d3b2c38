"""Committing a batch of repacked rows (docs/job-state.md, "Layout and format switches"): its intent
written (the commit point), its new outputs named and its rows journalled; their old copies go
later (`take_out`), once their source shard is read through. After a kill, `finish` carries out
every intent left, oldest first. Every step is idempotent.
Knows locations, temp names and records; no audio.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.errors import FatalError
from qtts.core.jobs.output.stores.layout import OLD_FILE
from qtts.core.jobs.output.stores.presence import containers, layouts
from qtts.core.jobs.output.stores.registry import default_layout, find, holder
from qtts.core.jobs.output.stores.retract import take_out_rows
from qtts.core.jobs.state.atomic_files import atomic_write, fsync_dir, unlink_quietly
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.state.paths import ARCHIVE_DIR, StatePaths
from qtts.core.jobs.state.records import RECORD_SCHEMA, as_bools

log = logging.getLogger("qtts")

INTENT_SCHEMA = RECORD_SCHEMA.append(pa.field(OLD_FILE, pa.string()))
TAKEN_OUT_BY = ("id", "file", "codes_saved", OLD_FILE)  # the columns take_out reads


def commit(
    out_dir: Path, suffix: str, journal: Journal, rows: pa.Table, batch: int
) -> tuple[Path, pa.Table]:
    """rows (INTENT_SCHEMA): a batch whose new outputs are durable under their temp names.
    Writes its intent, names its outputs and journals its rows; their old copies stay (take_out).
    (the intent, the rows moved)."""
    path = StatePaths(out_dir).repack_intent(suffix, batch)
    atomic_write(path, lambda f: pq.write_table(rows.cast(INTENT_SCHEMA), f))
    fsync_dir(path.parent)
    return path, _forward(out_dir, journal, rows)


def take_out(out_dir: Path, rows: pa.Table) -> None:
    """The old copies of committed rows (journalled, INTENT_SCHEMA) go; a plain file's codes stay
    under their name when the row keeps them in the files layout. metadata.jsonl goes first when
    a plain file does (retract.take_out_rows)."""
    if rows.num_rows == 0:
        return
    old = rows[OLD_FILE].combine_chunks()
    moved = as_bools(pc.not_equal(containers(old), containers(rows["file"].combine_chunks())))
    kept = moved & _layout_of(rows).codes_stay & as_bools(rows["codes_saved"])
    for rows_here, keep_codes in ((moved & ~kept, False), (kept, True)):
        if rows_here.any():
            mask = pa.array(rows_here)
            take_out_rows(out_dir, rows["id"].filter(mask), old.filter(mask), keep_codes=keep_codes)


def retire(intents: list[Path]) -> None:
    """Intents whose rows are all out of their old places."""
    for path in intents:
        unlink_quietly(path)


def finish(out_dir: Path, suffix: str, journal: Journal) -> int:
    """Carry out every repack intent a killed run left, oldest first; the rows moved (0: none).
    Every intent is named and journalled before the old copies go, at once: a source shard that
    fed many batches is rewritten once."""
    intents = StatePaths(out_dir).repack_intents(suffix)
    if not intents:
        return 0
    batches = [_read_intent(path) for path in intents]  # every one readable before any step
    moved = [_forward(out_dir, journal, batch) for batch in batches]
    schema = pa.schema([INTENT_SCHEMA.field(name) for name in TAKEN_OUT_BY])
    rows = pa.concat_tables([batch.select(TAKEN_OUT_BY).cast(schema) for batch in moved])
    take_out(out_dir, rows)
    retire(intents)
    return rows.num_rows


def _read_intent(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as e:  # damaged by hand or disk: never by a kill
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise FatalError(
            f"the repack intent {path} is unreadable ({why}). It lists rows a killed run was "
            "moving into another layout or audio format, which stay in two places without it: "
            "restore it if you can, else remake the job into a new out dir (removing the "
            "intent leaves those rows' audio twice in this one)"
        ) from None


def _forward(out_dir: Path, journal: Journal, rows: pa.Table) -> pa.Table:
    """Name the batch's outputs and journal the rows whose outputs are named: those rows."""
    named = _name(out_dir, containers(rows["file"].combine_chunks()))
    fsync_dir(out_dir / ARCHIVE_DIR)
    fsync_dir(out_dir)
    forward = rows.filter(pa.array(named))
    if forward.num_rows < rows.num_rows:
        log.warning(
            "%d repacked row(s) have no new output (removed by hand?): kept where they were",
            rows.num_rows - forward.num_rows,
        )
    journal.append(forward.select(RECORD_SCHEMA.names).to_pylist())
    return forward


def _name(out_dir: Path, finals: pa.Array) -> np.ndarray:
    """Each final container's temps, if still there, take their names (Layout.name_temps: a
    shard's every part, a file's codes and audio); per final (in order), whether it is named
    now. A shard named by many rows is renamed once."""
    named = {final: holder(out_dir, final).name_temps(out_dir, final)
             for final in pc.unique(finals).to_pylist()}  # fmt: skip
    if not named:
        return np.zeros(len(finals), dtype=bool)
    found = [k for k, ok in named.items() if ok]
    return as_bools(pc.is_in(finals, value_set=pa.array(found, pa.string())))


def _layout_of(rows: pa.Table):
    """The layout a batch was repacked into (a rerun may write another), from its locations."""
    kinds = pc.unique(layouts(rows["file"].combine_chunks()).dictionary_decode()).to_pylist()
    return find(kinds[0]) if kinds else default_layout()
