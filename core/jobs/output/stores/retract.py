"""Taking rows back out of the outputs before they are redone, so every id is in the out dir
exactly once.

The files layout needs this only when a run switches away from it: a redone file is replaced by
name. An archive member is never replaced by name (a redone row lands in a new shard), so before
a run redoes rows that sit in sealed shards (a changed fingerprint, --overwrite, another layout),
those shards are rewritten without them: copied less those rows into a temp file, fsynced, and
renamed over the old shard (deleted when nothing is left). Readers see the old shard or the new
one, never a row twice.

The steps are kept by an intent file (OUT/.qtts/retract[-shard-I-of-N].parquet: id, location),
written atomically first: then the rows' records go pending, then the shards are rewritten, then
the intent goes. A kill anywhere leaves the intent, and the next run of the shard finishes it
before it reads its records, so no row is ever recorded done while its member is gone, and no
old member survives its row's new version.
Knows locations and shards' part files (shard_files); the formats' bytes are theirs; no rows
beyond their ids.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.output.stores.files import codes_name, drop_audiofolder_view
from qtts.core.jobs.output.stores.locations import (
    ARCHIVE_DIR,
    FILES,
    containers,
    is_archived,
)
from qtts.core.jobs.output.stores.registry import part_of
from qtts.core.jobs.output.stores.shard_files import shard_at
from qtts.core.jobs.output.stores.shard_format import ArchiveFormat, Part
from qtts.core.jobs.state.atomic_files import atomic_write, fsync_dir, unlink_quietly
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.state.paths import StatePaths
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
    archive member, and plain files too unless the run writes files (it replaces those by name;
    None: nothing replaces them)."""
    if layout == FILES:
        return pc.fill_null(is_archived(locations), False)
    return pc.is_valid(locations)


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
    """Remove the rows `ids` from their outputs at `locations` (a plain file goes with its
    codes file unless keep_codes; a shard is rewritten without them, or removed), a container's
    rows at a time (sorted by container), never a Python object per row at once; then the
    folders are fsynced. metadata.jsonl goes before the first plain file does: it would list
    files that are gone (an AudioFolder loader fails on it) until the run's end rebuilds it, or,
    after a kill, the next run's. (rows, output files touched)."""
    table = pa.table({"id": ids, "container": containers(locations)})
    table = table.take(pc.sort_indices(table["container"]))
    names = table["container"].combine_chunks()
    if len(names) == 0:
        return 0, 0
    if not pc.all(pc.fill_null(is_archived(locations), False)).as_py():  # a plain file goes
        drop_audiofolder_view(out_dir)
    starts = np.flatnonzero(np.r_[True, ~as_bools(pc.equal(names[1:], names[:-1]))])
    for start, end in zip(starts, [*starts[1:], len(names)], strict=True):
        row_ids = table["id"].slice(start, end - start).to_pylist()
        _take_out(out_dir, names[start].as_py(), row_ids, keep_codes)
    fsync_dir(out_dir / ARCHIVE_DIR)
    fsync_dir(out_dir)
    return len(names), len(starts)


def _take_out(out_dir: Path, container: str, ids: list[str], keep_codes: bool) -> None:
    shard = shard_at(out_dir, container)
    if shard is None:  # a plain file of the files layout
        unlink_quietly(out_dir / container)
        for row_id in ids if not keep_codes else ():
            unlink_quietly(out_dir / codes_name(row_id))
        return
    gone = set(ids)
    for part, path in shard.paths():  # each part there, the key last; its own key too missing
        if path.exists():  # (a kill between a seal's renames) leaves the others to empty
            _rewrite_part(shard.fmt, part, path, gone)


def _rewrite_part(fmt: ArchiveFormat, part: Part, path: Path, gone: set[str]) -> None:
    """One part file less the rows `gone`: rewritten atomically, removed when none is left,
    untouched when it holds none of them (a rerun finishing a retraction)."""
    held = fmt.keys_in(part, path)
    left = sum(1 for k in held if k not in gone)
    if left == len(held):
        return
    if left == 0:
        unlink_quietly(path)
        return
    atomic_write(path, lambda file: fmt.copy_without(part, path, file, gone))


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
