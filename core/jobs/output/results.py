"""The out dir as its readers see it (`qtts results`, `qtts score`, the dataset card, a finished
run): its views rebuilt under the results lock, or built aside where that lock cannot be opened
(current_views; docs/job-state.md, "Results"); the rows present, the job it holds, its keep rules
and score columns, and a row's audio (MemberReader). Knows records, input ids and the views; no
models, no tensors.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.errors import UsageError
from qtts.core.jobs.output.keep_rules import RULES, KeepRules, read_keep_rules, write_keep_rules
from qtts.core.jobs.output.score_columns import SCORE_FIELDS, SCORES_NAME, record_stamps
from qtts.core.jobs.output.stores.member_reader import MemberReader
from qtts.core.jobs.output.stores.presence import list_out_dir, present
from qtts.core.jobs.output.stores.repack import check_no_killed_switch
from qtts.core.jobs.output.views import (
    BUILT_FOR,
    RESULTS_NAME,
    SHARED_VIEWS,
    Counts,
    paths_root,
    rebuild_once,
)
from qtts.core.jobs.state.atomic_files import cleanup_temp_files
from qtts.core.jobs.state.jobfile import JobFile, read_job_file
from qtts.core.jobs.state.lock import OutDirLock, lock_is_held
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.records import OK
from qtts.core.jobs.state.shard_state import UnreadableState, read_all

# The readers' face: what they take from here (the views' score columns, keep rules and a row's
# audio are re-exported from the modules that make them)
__all__ = [
    "RESULTS_NAME", "RULES", "SCORE_FIELDS", "SCORES_NAME", "KeepRules", "MemberReader",
    "ViewsNotWritable", "Views", "check_no_killed_switch", "current_views", "input_rows",
    "present_records", "read_keep_rules", "rebuild", "rebuild_out_dir", "record_stamps",
    "require_job", "results_locked", "up_to_date", "write_keep_rules",
]  # fmt: skip
log = logging.getLogger("qtts")

RESULTS_COMMAND_WAIT_S = 300  # `qtts results` waits this long for a shard that is rebuilding


class ViewsNotWritable(OSError):
    """The results lock cannot be opened here (a read-only mount, no write permission): the
    views cannot be rebuilt, and nothing was written."""


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
    return metadata.get(BUILT_FOR.encode()) == paths_root(out_dir).encode()


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
    results lock cannot be opened (current_views then reads the out dir as it is)."""
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
    job = require_job(out_dir)
    source = source or job.source
    if source == "-":
        raise UsageError("the job read stdin: pass the same lines with --input PATH")
    return job, input_rows(job.kind, source, job.columns)


def require_job(out_dir: Path) -> JobFile:
    """The out dir's job file; a UsageError (exit 2) when it holds no job."""
    job = read_job_file(out_dir)
    if job is None:
        raise UsageError(
            f"{out_dir} holds no qtts job (no .qtts/job.json): run qtts synth or "
            "qtts batch with --out-dir there first"
        )
    return job


def present_records(out_dir: Path, columns: tuple[str, ...]) -> pa.Table:
    """The ok records (these columns: `status`, `file` and `bytes` among them) of every shard
    whose audio is in the out dir as recorded."""
    records = read_all(out_dir, columns).combine_chunks()
    ok = pc.fill_null(pc.equal(records["status"], OK), False).to_numpy(zero_copy_only=False)
    ok &= present(records["file"], records["bytes"], list_out_dir(out_dir, sizes=True))
    return records.filter(pa.array(ok))


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


# -- the views as they are, for a reader that cannot rebuild them ----------------------------
ASIDE_PREFIX = "qtts-results-"
READER_LOCK = "reader.lock"
# A folder younger than this may be a reader's that has not taken its lock yet
GRACE_S = 60.0


@dataclass(frozen=True)
class Views:
    summary: dict  # the counts, as `qtts results` prints them (results.counts_summary)
    results: Path  # a results.parquet as of the state now: OUT's own, or one built aside
    not_rebuilt: str | None  # why OUT's views were left as they were; None: they were rebuilt


@contextmanager
def current_views(out_dir: Path, source: str | None = None) -> Iterator[Views]:
    """The views rebuilt in OUT under the results lock; where that lock cannot be opened,
    built aside from the state as it is (the temporary folder lives for the `with` block)."""
    job, rows = job_rows(out_dir, source)
    try:
        counts = rebuilt_counts(out_dir, rows)
    except ViewsNotWritable as e:
        why = e.strerror or str(e)
    else:
        del rows  # what the caller reads next comes from results.parquet (1 GB at 10M rows)
        summary = {**counts_summary(out_dir, job, counts), "rebuilt": True}
        yield Views(summary, out_dir / RESULTS_NAME, None)
        return
    where = _aside_in(out_dir)
    if where is not None:
        remove_dead_asides(where)
    with tempfile.TemporaryDirectory(prefix=ASIDE_PREFIX, dir=where) as aside:
        with OutDirLock(Path(aside) / READER_LOCK):
            counts = rebuild_once(out_dir, rows, list_out_dir(out_dir, sizes=False), Path(aside))
            del rows
            summary = {**counts_summary(out_dir, job, counts), "rebuilt": False}
            yield Views(summary, Path(aside) / RESULTS_NAME, why)


def remove_dead_asides(folder: Path, now: float | None = None) -> list[str]:
    """Folders of readers killed while building aside (their lock held by nobody, older than
    GRACE_S), removed; their names."""
    now = time.time() if now is None else now
    removed = []
    for aside in folder.glob(f"{ASIDE_PREFIX}*"):
        try:
            young = now - aside.stat().st_mtime < GRACE_S
        except OSError:
            continue  # gone meanwhile
        if aside.is_dir() and not young and not lock_is_held(aside / READER_LOCK):
            shutil.rmtree(aside, ignore_errors=True)
            removed.append(aside.name)
    return removed


def _aside_in(out_dir: Path) -> Path | None:
    """Where the views are built aside: OUT/.qtts where this process may write there (the lock
    alone cannot be opened), so ten million rows' staged columns and results.parquet land on the
    out dir's disk, not in $TMPDIR (often small, or memory); else $TMPDIR (None)."""
    folder = StatePaths(out_dir).dir
    return folder if os.access(folder, os.W_OK | os.X_OK) else None
