"""results.parquet and metadata.jsonl for a whole out dir, rebuilt from every shard's state.

One row per input row that has an outcome, in input order: its latest record (an ok row only if
its file is there), with the row number and absolute path as they are now. Pending rows (not
done, or to be redone) have no row. Shards of one job share the out dir: whenever one finishes,
and whenever `qtts results OUT` asks, the views are rebuilt under a short lock and replaced
atomically. A shard that finds the lock busy leaves the rebuild to the holder, who rebuilds
again if a state changed while it worked, so after the last shard the views cover every row.
A process that cannot open the lock (a read-only mount) rebuilds nothing: ViewsNotWritable, and
`qtts results` reads the out dir as it is (views_aside.py). metadata.jsonl is left out when it
would list no row (an empty one breaks load_dataset("audiofolder")).
Knows records, input ids and files; no models, no tensors.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.output.keep_rules import KEPT, read_keep_rules
from qtts.core.jobs.output.recorder import MEASURES
from qtts.core.jobs.output.score_columns import SCORE_FIELDS, with_scores
from qtts.core.jobs.output.stores.formats.files import METADATA_KEYS, METADATA_NAME
from qtts.core.jobs.output.stores.presence import (
    Listing,
    containers,
    is_archived,
    list_out_dir,
    members,
    present,
)
from qtts.core.jobs.output.view_columns import StagedColumns
from qtts.core.jobs.output.voice_rates import RATE_COLUMNS, READ_COLUMNS, rate_ratios
from qtts.core.jobs.state.atomic_files import atomic_write, cleanup_temp_files, unlink_quietly
from qtts.core.jobs.state.jobfile import JobFile
from qtts.core.jobs.state.jsonl import table_lines
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.record_source import RecordSource
from qtts.core.jobs.state.records import FAILED, OK, RECORD_SCHEMA
from qtts.core.jobs.state.shard_state import UnreadableState

log = logging.getLogger("qtts")

RESULTS_NAME = "results.parquet"
BUILT_FOR = "qtts_out_dir"  # results.parquet's schema metadata: the folder its paths are under
SHARED_VIEWS = (RESULTS_NAME, METADATA_NAME)

RESULT_COLUMNS = (
    "id",
    "row",
    "status",
    "path",
    "member",
    "num_frames",
    "num_samples",
    "duration_s",
    "sample_rate",
    "seed",
    "hit_frame_budget",
    "segments",
    "segment_frames",
    "error",
    "model",
    "text",
    "speaker",
    "language",
    "instruct",
    "ref_audio",
    "ref_text",
    "voice",
    "settings",
)
# The tries a row took, the seed it kept, its model-free measures and its loudness as normalized
# (records.RECORD_SCHEMA).
RESULT_COLUMNS += ("attempts", "kept_seed", "segment_seeds", *MEASURES, "segment_chars_per_s")
RESULT_COLUMNS += ("loudness_lufs", "loudness_status")
# Which record each row shows, and whether its audio is there, is decided on these columns of
# every record; the views' other record columns are read later, one at a time (view_columns.py).
MERGE_COLUMNS = ("id", "status", "file", "bytes", "run", "t")
FROM_RECORDS = tuple(c for c in RESULT_COLUMNS if c not in ("row", "path", "member"))
STAGED_COLUMNS = tuple(c for c in FROM_RECORDS if c not in MERGE_COLUMNS)
RESULTS_COMMAND_WAIT_S = 300  # `qtts results` waits this long for a shard that is rebuilding
BATCH = 1 << 18  # input rows per batch of the views being written


class ViewsNotWritable(OSError):
    """The results lock cannot be opened here (a read-only mount, no write permission): the
    views cannot be rebuilt, and nothing was written."""


class _NothingListed(Exception):
    """metadata.jsonl would list no row: it is not published (write_views)."""


@dataclass(frozen=True)
class Counts:
    total: int
    ok: int
    failed: int

    @property
    def pending(self) -> int:
        return self.total - self.ok - self.failed


@dataclass
class Picks:
    """Which record each input row shows: decided on the merge columns; the rest are staged a
    column at a time while the views are written (memory: the widest column once, plus a
    batch)."""

    rows: pa.Table  # the input's row, id, text
    records: RecordSource  # winners: MERGE_COLUMNS of each id's latest record
    source: np.ndarray  # per input row: the index of its record in records.winners, or -1

    def counts(self) -> Counts:
        shown = self.records.winners["status"].take(pa.array(self.source[self.source >= 0]))
        ok = pc.sum(pc.equal(shown, OK)).as_py() or 0
        failed = (pc.sum(pc.equal(shown, FAILED)).as_py() or 0) + self.rows["id"].null_count
        return Counts(self.rows.num_rows, ok, failed)


def pick(rows: pa.Table, records: RecordSource, listing: Listing) -> Picks:
    """rows: every input row (all shards); records: every shard's latest records."""
    winners = records.winners
    status = winners["status"]
    ok = pc.fill_null(pc.equal(status, OK), False).to_numpy(zero_copy_only=False)
    is_failed = pc.fill_null(pc.equal(status, FAILED), False).to_numpy(zero_copy_only=False)
    keep = is_failed | (ok & present(winners["file"], winners["bytes"], listing))
    kept = np.flatnonzero(keep)
    at = pc.index_in(rows["id"], value_set=winners["id"].take(pa.array(kept)))
    source = np.full(rows.num_rows, -1, dtype=np.int64)
    has = pc.is_valid(at).to_numpy(zero_copy_only=False)
    source[has] = kept[pc.drop_null(at).to_numpy()]
    return Picks(rows, records, source)


def result_batches(
    out_dir: Path, picks: Picks, shown: pa.Table, staged: StagedColumns
) -> Iterator[pa.Table]:
    """results.parquet's rows in input order, `staged.size` input rows at a time. shown: the
    winners' merge columns (and scores), taken here; staged: every other record column."""
    root = pa.scalar(_paths_root(out_dir) + os.sep)
    scored = [c for c in SCORE_FIELDS.names if c in shown.column_names]
    kept = (*MERGE_COLUMNS, *RATE_COLUMNS, *scored)
    shown = shown.select([c for c in shown.column_names if c in kept])
    size = staged.size
    for k, start in enumerate(range(0, picks.rows.num_rows, size)):
        rows = picks.rows.slice(start, size)
        source = picks.source[start : start + size]
        has = source >= 0
        taken = shown.take(pa.array(source[has]))
        for name, column in staged.batch(k):
            taken = taken.append_column(name, column)
        taken = taken.append_column("row", rows["row"].filter(pa.array(has)))
        # path: the audio file, or the archive shard holding the row's `member`
        path = pc.binary_join_element_wise(root, containers(taken["file"]), "")
        taken = taken.append_column("path", path).append_column("member", members(taken["file"]))
        # An ok row recorded before qtts split long text was made whole: one segment.
        whole = pc.and_(pc.equal(taken["status"], OK), pc.is_null(taken["segments"]))
        taken = taken.set_column(
            taken.schema.get_field_index("segments"),
            "segments",
            pc.if_else(whole, 1, taken["segments"]),
        )
        null_ids = rows.filter(pc.is_null(rows["id"]))
        if null_ids.num_rows:  # they fail validation and have no record (no id to key it by)
            n = null_ids.num_rows
            extra = pa.table(
                {
                    "row": null_ids["row"],
                    "text": null_ids["text"].cast(pa.large_string()),
                    "status": pa.array([FAILED] * n, pa.string()),
                    "error": pa.array(["id is null"] * n, pa.string()),
                }
            )
            taken = pa.concat_tables([taken, extra], promote_options="default")
            taken = taken.take(pc.sort_indices(taken["row"]))
        yield taken.select([*RESULT_COLUMNS, *RATE_COLUMNS, *scored])


def write_views(out_dir: Path, picks: Picks, into: Path | None = None) -> None:
    """results.parquet and metadata.jsonl in one pass over the batches (each file atomic), with
    the scores of OUT/scores.parquet when there are some (qtts.core.jobs.output.score_columns), and,
    under keep rules (qtts.core.jobs.output.keep_rules), a `kept` column and only the kept rows in
    metadata.jsonl. metadata.jsonl is the files layout's (AudioFolder) view: it lists rows in
    files, and an out dir whose rows all sit in archive shards (which carry their own metadata)
    has none; nor has one where no row would be listed (keep rules that keep none, no ok row):
    Hugging Face's AudioFolder fails on an empty one (IndexError in datasets < 4).
    into: the folder the views (and their staged columns) are written to; OUT by default."""
    into = out_dir if into is None else into
    shown = with_scores(_with_rates(picks), out_dir)
    scored = [c for c in SCORE_FIELDS.names if c in shown.column_names]
    keys = {**METADATA_KEYS, **{c: c for c in scored}}
    rules = read_keep_rules(out_dir)
    staging = StatePaths(into).view_staging
    staged = StagedColumns(staging, picks.records, picks.source, BATCH)

    def write_both(results_file: BinaryIO, metadata_file: BinaryIO | None = None) -> None:
        schema = _empty_results().schema
        for name in scored:
            schema = schema.append(SCORE_FIELDS.field(name))
        if not rules.empty:
            schema = schema.append(pa.field(KEPT, pa.bool_()))
        schema = schema.with_metadata({BUILT_FOR: _paths_root(out_dir)})
        writer = pq.ParquetWriter(results_file, schema, compression="zstd")
        listed = 0
        for batch in result_batches(out_dir, picks, shown, staged):
            is_ok = pc.fill_null(pc.equal(batch["status"], OK), False)
            in_file = pc.invert(pc.fill_null(pc.is_valid(batch["member"]), False))
            if not rules.empty:  # null for a row that is not ok: there is nothing to keep
                kept = pa.array(rules.passes(batch))
                batch = batch.append_column(
                    KEPT, pc.if_else(is_ok, kept, pa.scalar(None, pa.bool_()))
                )
                is_ok = pc.and_(is_ok, kept)
            writer.write_table(batch.cast(schema))
            ok = batch.filter(pc.and_(is_ok, in_file))  # archives carry their own metadata
            ok = ok.append_column("file_name", pc.replace_substring_regex(ok["path"], r"^.*/", ""))
            listed += ok.num_rows
            for data in table_lines(ok, keys) if metadata_file is not None else ():
                metadata_file.write(data)
        writer.close()
        if metadata_file is not None and not listed:
            raise _NothingListed  # results.parquet is whole; metadata.jsonl's temp is dropped

    def write_metadata_or_none(results_file: BinaryIO) -> None:
        try:
            atomic_write(into / METADATA_NAME, lambda f: write_both(results_file, f))
        except _NothingListed:
            unlink_quietly(into / METADATA_NAME)
            if not rules.empty and bool(pc.any(pc.equal(shown["status"], OK)).as_py()):
                log.info("no ok row meets the keep rules (%s): no metadata.jsonl", rules.describe())

    with staged:
        for name in STAGED_COLUMNS:
            staged.stage(name)
        if _archives_only(shown["file"]):
            atomic_write(into / RESULTS_NAME, write_both)
            unlink_quietly(into / METADATA_NAME)
            return
        atomic_write(into / RESULTS_NAME, write_metadata_or_none)


def _with_rates(picks: Picks) -> pa.Table:
    """The winners with each row's speaking rate against its voice's (voice_rates.py)."""
    winners = picks.records.winners
    shown = np.zeros(winners.num_rows, dtype=bool)
    shown[picks.source[picks.source >= 0]] = True
    shown &= pc.fill_null(pc.equal(winners["status"], OK), False).to_numpy(zero_copy_only=False)
    for name, column in rate_ratios(picks.records, shown).items():
        winners = winners.append_column(name, column)
    return winners


def _archives_only(locations: pa.Array) -> bool:
    """Some row sits in an archive shard and none in a plain file."""
    located = pc.drop_null(locations)
    archived = pc.fill_null(is_archived(located), False)
    return bool(len(located)) and bool(pc.all(archived).as_py())


def _empty_results() -> pa.Table:
    schema = RECORD_SCHEMA
    fields = [
        schema.field(c)
        if c in schema.names
        else pa.field(c, pa.int64() if c == "row" else pa.string())
        for c in RESULT_COLUMNS
    ]
    fields += [pa.field(c, pa.float64()) for c in RATE_COLUMNS]
    return pa.schema(fields).empty_table()


@contextmanager
def results_locked(out_dir: Path, wait_s: float) -> Iterator[bool]:
    """Holds the results lock while the block runs (the views' rebuild, the dataset card);
    False where another process held it past wait_s. ViewsNotWritable where it cannot be
    opened: nothing was written, as everything written under it waits for it."""
    from filelock import FileLock, Timeout

    path = StatePaths(out_dir).results_lock
    lock = FileLock(str(path), timeout=wait_s)
    try:
        lock.acquire()
    except Timeout:  # a TimeoutError, so an OSError: caught first
        yield False
        return
    except OSError as e:
        raise ViewsNotWritable(e.errno, f"cannot open {path}: {e.strerror or e}") from e
    try:
        yield True
    finally:
        lock.release()


def rebuild(out_dir: Path, rows: pa.Table, *, wait_s: float) -> Counts | None:
    """Rebuild the views under the results lock; None when another process holds it longer
    than wait_s (it rebuilds after us, seeing our state)."""
    with results_locked(out_dir, wait_s) as held:
        return _rebuild_held(out_dir, rows) if held else None


def _rebuild_held(out_dir: Path, rows: pa.Table) -> Counts:
    """The rebuild, the results lock held: again while shards finish under it."""
    rounds = 0
    while True:  # again while shards finish under us: each changes its state once
        rounds += 1
        before = _state_stamp(out_dir)
        listing = list_out_dir(out_dir, sizes=False)  # resume checks the sizes
        cleanup_temp_files(
            out_dir, owns=lambda final: final in SHARED_VIEWS, names=listing.temps
        )  # a rebuild that was killed
        last = rounds > len(before) + 1
        try:
            counts = rebuild_once(out_dir, rows, listing)
        except UnreadableState:
            # A state replaced under an open handle can fail to read where the
            # filesystem does not keep a replaced file for its readers (NFS): if a
            # state changed, that was it, and the next round reads the new one.
            if last or _state_stamp(out_dir) == before:
                raise
            continue
        if last or _state_stamp(out_dir) == before:
            break
    return counts


def rebuild_once(
    out_dir: Path, rows: pa.Table, listing: Listing, into: Path | None = None
) -> Counts:
    """One round: the records merged, the views written (into OUT, or the folder `into`); the
    states closed, whatever happens."""
    records = None
    try:
        records = RecordSource.open(out_dir, MERGE_COLUMNS, (*STAGED_COLUMNS, *READ_COLUMNS))
        picks = pick(rows, records, listing)
        write_views(out_dir, picks, into)
        return picks.counts()
    except UnreadableState as e:  # the views as they were beat views without a shard
        raise UnreadableState(
            f"{e}; {RESULTS_NAME} and {METADATA_NAME} are kept as they were"
        ) from None
    finally:
        if records is not None:
            records.close()


def up_to_date(out_dir: Path, inputs: list[Path]) -> bool:
    """results.parquet is newer than every state, journal and input it was built from, and was
    built in this folder (its paths are absolute: an out dir copied or moved lists the old)."""
    try:
        built = os.stat(out_dir / RESULTS_NAME).st_mtime_ns
        newest = max((os.stat(p).st_mtime_ns for p in [*_state_files(out_dir), *inputs]), default=0)
        if newest >= built:
            return False
        metadata = pq.read_schema(out_dir / RESULTS_NAME).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return metadata.get(BUILT_FOR.encode()) == _paths_root(out_dir).encode()


def _paths_root(out_dir: Path) -> str:
    """The folder results.parquet's paths are under, as it records it (BUILT_FOR)."""
    return str(out_dir.resolve())


def _state_files(out_dir: Path) -> list[Path]:
    """What the views are built from in the state folder: the job file too, which --input-moved
    rewrites (another input: other rows, whatever its files' times)."""
    paths = StatePaths(out_dir)
    job = [paths.job_file] if paths.job_file.exists() else []
    return [*paths.states(), *paths.journals(), *job]


def _state_stamp(out_dir: Path) -> set[tuple[str, int, int]]:
    """What a finishing shard changes: its state file (journals change all the time)."""
    stamp = set()
    for p in StatePaths(out_dir).states():
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        stamp.add((p.name, st.st_mtime_ns, st.st_size))
    return stamp


def input_rows(kind: str, source: str, columns: Mapping[str, str] | None = None) -> pa.Table:
    """row, id and text of every input row (text only where an id is null: results need it);
    columns: the manifest's column for each field named otherwise, as the job file records."""
    from qtts.core.jobs.contract.spec import ManifestColumns
    from qtts.core.jobs.rows.manifest import read_manifest, read_text_lines

    if kind == "synth":
        return read_text_lines(source).select(["row", "id", "text"])
    names = ManifestColumns(dict(columns or {}))
    rows = read_manifest(source, names, ("id",), text_if_null_id=True)
    return rows.select(["row", "id", "text"])


def rebuild_out_dir(out_dir: Path, source: str | None = None) -> dict:
    """`qtts results OUT`: the views rebuilt for every row of the job's input (re-read from
    where the job file says, or `source`); the counts as one dict. ViewsNotWritable where the
    results lock cannot be opened (views_aside.read_views then reads the out dir as it is)."""
    job, rows = job_rows(out_dir, source)
    return counts_summary(out_dir, job, rebuilt_counts(out_dir, rows))


def rebuilt_counts(out_dir: Path, rows: pa.Table) -> Counts:
    """rebuild, for a command: waits up to RESULTS_COMMAND_WAIT_S, then LockHeldError (75)."""
    counts = rebuild(out_dir, rows, wait_s=RESULTS_COMMAND_WAIT_S)
    if counts is None:
        from qtts.core.errors import LockHeldError

        raise LockHeldError(
            f"another process has held {StatePaths(out_dir).results_lock} for "
            f"{RESULTS_COMMAND_WAIT_S} s; try again later"
        )
    return counts


def job_rows(out_dir: Path, source: str | None = None) -> tuple[JobFile, pa.Table]:
    """(the job file, every input row): the input re-read from where the job file says, or
    from `source`; a UsageError when OUT holds no job or the job read stdin."""
    from qtts.core.errors import UsageError
    from qtts.core.jobs.state.jobfile import read_job_file

    job = read_job_file(out_dir)
    if job is None:
        raise UsageError(
            f"{out_dir} holds no qtts job (no .qtts/job.json): run qtts synth or "
            "qtts batch with --out-dir there first"
        )
    source = source or job.source
    if source == "-":
        raise UsageError("the job read stdin: pass the same lines with --input PATH")
    return job, input_rows(job.kind, source, job.columns)


def counts_summary(out_dir: Path, job: JobFile, counts: Counts) -> dict:
    """`qtts results`' counts, as its JSON line gives them. complete: every row has an outcome,
    ok or failed (none pending); `failed` says how many failed (a rerun tries them again)."""
    return {
        "total": counts.total,
        "ok": counts.ok,
        "failed": counts.failed,
        "pending": counts.pending,
        "complete": counts.pending == 0,
        "num_shards": job.num_shards,
        "results": str(out_dir / RESULTS_NAME),
    }
