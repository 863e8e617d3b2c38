"""Taking rows back out of the outputs before they are redone, so every id is in the out dir once
(docs/job-state.md, "Archive shards"): an intent file first, then the rows' records pending, then
each layout's containers rewritten, then the intent removed; a kill anywhere leaves the intent
for the shard's next run to finish. Knows locations and intents; the containers are the layouts'.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.output.stores.layout import Layout
from qtts.core.jobs.output.stores.presence import containers, layouts
from qtts.core.jobs.output.stores.registry import find, formats, part_of
from qtts.core.jobs.state.atomic_files import atomic_write, fsync_dir, unlink_quietly
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.state.paths import ARCHIVE_DIR, StatePaths
from qtts.core.jobs.state.records import as_bools, pending_records

log = logging.getLogger("qtts")


def retract(
    out_dir: Path,
    suffix: str,
    journal: Journal,
    run: str,
    ids: pa.Array | pa.ChunkedArray,
    locations: pa.Array | pa.ChunkedArray,
    *,
    layout: str | None,
) -> pa.Array:
    """Take the rows `ids` (recorded at `locations`) out of the outputs this run would not
    replace by name (layout None: of every output; they are not made again); the ids taken out
    (their records are pending now)."""
    intent = pa.table({"id": ids, "file": locations}).filter(taken_out(locations, layout))
    if intent.num_rows == 0:
        return intent["id"].combine_chunks()
    path = StatePaths(out_dir).retract_intent(suffix)
    atomic_write(path, lambda f: pq.write_table(intent, f))
    finish(out_dir, suffix, journal, run)
    return intent["id"].combine_chunks()


def taken_out(locations: pa.Array | pa.ChunkedArray, layout: str | None) -> pa.Array:
    """Which of these rows' outputs a run writing `layout` takes out before redoing them: every
    one but those its layout replaces by name (files; None: nothing replaces them)."""
    fmt = find(layout) if layout is not None else None
    if fmt is None or not fmt.replaces_by_name or len(locations) == 0:
        return pc.is_valid(locations)
    if isinstance(locations, pa.ChunkedArray):
        locations = locations.combine_chunks()
    return pc.and_(pc.is_valid(locations), pa.array(~fmt.claims(locations)))


def outputs_touched(locations: pa.Array | pa.ChunkedArray) -> int:
    """How many output files taking out these locations rewrites or removes (shards, files)."""
    if len(locations) == 0:
        return 0
    return pc.count_distinct(containers(locations)).as_py()


def finish(out_dir: Path, suffix: str, journal: Journal, run: str) -> None:
    """Carry out a retraction an earlier step (or a killed run) left in its intent file."""
    path = StatePaths(out_dir).retract_intent(suffix)
    if not path.exists():
        return
    intent = pq.read_table(path)
    if intent.num_rows == 0:
        unlink_quietly(path)
        return
    journal.append_table(pending_records(intent["id"], run=run))
    rows, files = take_out_rows(out_dir, intent["id"], intent["file"])
    unlink_quietly(path)
    log.info("took %d row(s) out of %d output file(s) to redo them", rows, files)


def take_out_rows(
    out_dir: Path,
    ids: pa.Array | pa.ChunkedArray,
    locations: pa.Array | pa.ChunkedArray,
    *,
    keep_codes: bool = False,
) -> tuple[int, int]:
    """Remove the rows `ids` from their outputs at `locations`, each layout's from its own
    containers (Layout.take_out; keep_codes: codes kept by name stay) once what lists them is
    gone (Layout.unlist), a container at a time; then the folders are fsynced. (rows, files)."""
    table = pa.table({"id": ids, "container": containers(locations), "layout": layouts(locations)})
    table = table.take(pc.sort_indices(table["container"]))
    if table.num_rows == 0:
        return 0, 0
    touched = 0
    kinds = table["layout"].combine_chunks().indices
    for k, fmt in enumerate(formats().values()):
        mine = table.filter(pc.equal(kinds, k))
        if mine.num_rows == 0:
            continue
        fmt.unlist(out_dir)  # no view lists a row whose output is gone
        names = mine["container"].combine_chunks()
        starts = np.flatnonzero(np.r_[True, ~as_bools(pc.equal(names[1:], names[:-1]))])
        for start, end in zip(starts, [*starts[1:], len(names)], strict=True):
            row_ids = mine["id"].slice(start, end - start).to_pylist()
            _take_out(fmt, out_dir, names[start].as_py(), row_ids, keep_codes)
        touched += len(starts)
    fsync_dir(out_dir / ARCHIVE_DIR)
    fsync_dir(out_dir)
    return table.num_rows, touched


def _take_out(fmt: Layout, out_dir: Path, container: str, ids: list[str], keep_codes: bool):
    """One container less some rows: the step a kill may come between."""
    fmt.take_out(out_dir, container, ids, keep_codes=keep_codes)


def remove_every_archive(out_dir: Path) -> None:
    """--overwrite with another shard count: every row is redone under the new split, so the
    old split's shards (and any retraction or repacking it left half done) go."""
    data = out_dir / ARCHIVE_DIR
    for name in [p.name for p in data.iterdir()] if data.is_dir() else []:
        if part_of(name) is not None:  # every format's files, no other file
            unlink_quietly(data / name)
    for pattern in ("retract*.parquet", "repack*.parquet"):
        for path in StatePaths(out_dir).dir.glob(pattern):
            unlink_quietly(path)
    for path in StatePaths(out_dir).dir.glob("repack-columns*"):
        shutil.rmtree(path, ignore_errors=True)
