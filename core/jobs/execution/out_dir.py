"""The out dir as a run finds it and records itself in it: its .qtts folder made (for --dry-run,
checked without making it), each refusal a UsageError in the run's words; the layout and format it
keeps (docs/job-state.md, "The out dir keeps its layout and format"); and, under the job lock, the
job file (its checks made again now that no other run can change it) and the settings registry.
Knows paths, permissions, records, locations, the job file and lock files; no models.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.choices import AudioFormat
from qtts.core.jobs.contract.spec import OutputOptions
from qtts.core.jobs.output.stores.presence import layouts
from qtts.core.jobs.output.stores.registry import default_layout, find, layout_names
from qtts.core.jobs.output.stores.retract import remove_every_archive
from qtts.core.jobs.state import shard_state as state
from qtts.core.jobs.state.atomic_files import cleanup_temp_files
from qtts.core.jobs.state.jobfile import (
    JOB_LOCK_TIMEOUT_S,
    JobFile,
    check_input,
    job_for,
    read_job_file,
    resolve_shard,
    seed_rule_for,
    write_job_file,
)
from qtts.core.jobs.state.lock import old_run_error, old_split_locks
from qtts.core.jobs.state.paths import LEGACY_JOB_FILE, StatePaths
from qtts.core.jobs.state.records import OK
from qtts.core.jobs.state.shards import ShardRequest
from qtts.core.jobs.work.fingerprint import read_registry, remember
from qtts.core.jobs.work.precision import cpu_auto_for_job_file

if TYPE_CHECKING:
    from qtts.core.jobs.execution.locked_run import RunSetup

SHARED_FILES = ("job.json", "settings.json", "refs.json")  # written under the job lock
LEGACY_FILES = (LEGACY_JOB_FILE, ".qtts-journal*.jsonl", ".qtts*.lock", ".qtts-results.lock")


def make_out_dir(path: Path) -> None:
    """Create the out dir's .qtts (path), or refuse with UsageError (exit 2) naming why."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _cannot_create(path, e.strerror or str(e)) from None
    _check_writable(path)


def check_out_dir(path: Path) -> None:
    """make_out_dir's refusals, asked without creating anything (--dry-run): the nearest part of
    the path that exists must be a directory this process can write, or be the writable .qtts."""
    # lexists: a dangling link is there for mkdir too (EEXIST); "." and "/" always exist
    existing = next(p for p in (path, *path.parents) if os.path.lexists(p))
    if existing == path:
        if not path.is_dir():
            raise _cannot_create(path, os.strerror(errno.EEXIST))  # what mkdir(exist_ok) says
        _check_writable(path)
    elif not existing.is_dir():  # mkdir meets a file (ENOTDIR) or a dangling link (EEXIST)
        raise _cannot_create(
            path, os.strerror(errno.EEXIST if existing.is_symlink() else errno.ENOTDIR)
        )
    elif not os.access(existing, os.W_OK | os.X_OK):  # mkdir under it would be refused
        denied = errno.EROFS if _read_only(existing) else errno.EACCES
        raise _cannot_create(path, os.strerror(denied))


def _cannot_create(path: Path, why: str) -> UsageError:
    return UsageError(f"cannot create --out-dir {path}: {why}")


def _check_writable(path: Path) -> None:
    if not os.access(path, os.W_OK | os.X_OK):
        why = "read-only file system" if _read_only(path) else "permission denied"
        raise UsageError(f"cannot write to --out-dir {path}: {why}")


def _read_only(path: Path) -> bool:
    """Whether `path` lies on a file system mounted read-only (not a permission problem)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # AttributeError: no statvfs on this platform
        return False


log = logging.getLogger("qtts")
DEFAULT_FORMAT = "wav"  # --format on a new out dir (--output's: the registry's default layout)
FLAGS = {"layout": "--output", "audio_format": "--format"}  # job.json key -> its option


def with_recorded_output(out_dir: Path, recorded: JobFile | None) -> JobFile | None:
    """`recorded`, its missing layout and audio_format read from the out dir's records (left
    None where no ok row says)."""
    if recorded is None or (recorded.layout is not None and recorded.audio_format is not None):
        return recorded
    rows = state.read_all(out_dir, ("status", "file", "settings"))
    ok = rows.filter(pc.fill_null(pc.equal(rows["status"], OK), False))
    if ok.num_rows == 0:
        return recorded
    layout = recorded.layout or _most(layouts(ok["file"]))
    made_with = _most(ok["settings"])
    audio_format = recorded.audio_format or read_registry(out_dir).get(made_with, {}).get("format")
    return replace(recorded, layout=layout, audio_format=audio_format)


def _most(values: pa.Array | pa.ChunkedArray) -> str | None:
    """The most common value (counted in Arrow: millions of rows), or None when all are null."""
    counts = pc.value_counts(pc.drop_null(values))
    if len(counts) == 0:
        return None
    return counts.field("values")[int(np.argmax(counts.field("counts")))].as_py()


def settle_output(output: OutputOptions, recorded: JobFile | None) -> OutputOptions:
    """--output and --format as given; one left out (None) is the out dir's own, as its job file
    records it, or the default (files, wav) for a new out dir. Another value than the out dir's
    repacks its finished rows; leaving a flag out never does."""
    layout, audio_format = output.layout, output.audio_format
    kept, inherited = [], []
    if layout is None:
        default = default_layout().name
        layout = (recorded and recorded.layout) or default
        _check_recorded(output.out_dir, "layout", layout, layout_names())
        kept += [f"--output {layout}"] if layout != default else []
        inherited.append("layout")
    if audio_format is None:
        recorded_format = (recorded and recorded.audio_format) or DEFAULT_FORMAT
        formats = [f.value for f in AudioFormat]
        _check_recorded(output.out_dir, "audio_format", recorded_format, formats)
        audio_format = AudioFormat(recorded_format)
        kept += [f"--format {audio_format.value}"] if audio_format.value != DEFAULT_FORMAT else []
        inherited.append("audio_format")
    if kept:
        log.info("%s: as %s holds them (pass another to repack)", ", ".join(kept), output.out_dir)
    if output.shard_rows_given and not find(layout).shards:  # harmless, but not what was meant
        log.warning("--shard-rows %d does nothing with --output %s", output.shard_rows, layout)
    return replace(output, layout=layout, audio_format=audio_format, inherited=tuple(inherited))


def _check_recorded(out_dir: Path, key: str, value: str, known: Iterable[str]) -> None:
    known = list(known)
    if value not in known:
        raise UsageError(
            f"{out_dir}/.qtts/job.json records {key} {value!r}, which this qtts does not know "
            f"(it knows {', '.join(known)}): pass {FLAGS[key]} to say what to write, or upgrade "
            "qtts"
        )


def check_output_unchanged(out_dir: Path, output: OutputOptions, recorded: JobFile | None) -> None:
    """Under the job lock: a layout or format this run took from the job file is still the one
    recorded there; another run may have switched it since (a task given --output while this one
    read the file), and writing the old value back would undo that switch."""
    if recorded is None:
        return
    now = {"layout": recorded.layout, "audio_format": recorded.audio_format}
    mine = {"layout": output.layout, "audio_format": getattr(output.audio_format, "value", None)}
    for key in output.inherited:
        if now[key] is not None and now[key] != mine[key]:
            flag = FLAGS[key]
            raise UsageError(
                f"{out_dir} was just switched to {flag} {now[key]} by another run; run again to "
                f"join it (or pass {flag} {mine[key]} to switch it back)"
            )


def write_job_files(setup: RunSetup, req: ShardRequest, source: str) -> None:
    """Record `job`, whose shard lock this process holds."""
    from filelock import FileLock

    spec, out = setup.spec, setup.spec.output.out_dir
    paths = StatePaths(out)
    with FileLock(str(paths.job_lock), timeout=JOB_LOCK_TIMEOUT_S):
        recorded = read_job_file(out, legacy_ok=spec.output.overwrite)
        cleanup_temp_files(paths.dir, owns=lambda final: final in SHARED_FILES)  # a killed write
        if spec.output.overwrite:
            _remove_legacy(out)
        check_input(spec, recorded, source)
        shard = resolve_shard(
            out, req, recorded, overwrite=spec.output.overwrite, announce=False
        )  # prepare_job said it already
        if shard.count != setup.shard.count:  # another run recorded the out dir meanwhile
            now = recorded.num_shards if recorded is not None else "another number of"
            raise UsageError(
                f"{out} was just recorded with {now} shard(s) by another run; run again to join it"
            )
        if recorded is not None and recorded.num_shards != shard.count:
            _no_old_run(paths, recorded.num_shards)
            remove_every_archive(out)  # first: shards without records would be made again
            state.reset(out, None)
        check_output_unchanged(out, spec.output, recorded)  # a switch by another task stands
        new = job_for(spec.kind.value, source, shard, req, spec.columns.renamed)
        if recorded is not None and recorded.num_shards == new.num_shards:
            new = replace(new, array_min=recorded.array_min, array_step=recorded.array_step)
        mine = setup.precision
        pin = cpu_auto_for_job_file(
            out, recorded, mine.cpu_auto, overwrite=spec.output.overwrite, seen=mine.seen
        )
        new = replace(
            new,
            cpu_auto_dtype=pin,
            layout=spec.output.layout,
            audio_format=spec.output.audio_format.value,
            default_seed=seed_rule_for(recorded, overwrite=spec.output.overwrite),
        )
        if new != recorded:
            write_job_file(out, new)
        remember(out, setup.settings)


def _no_old_run(paths: StatePaths, old_count: int) -> None:
    """No run of the old split may be going (the new split's tasks, starting beside this one,
    are welcome)."""
    from filelock import FileLock, Timeout

    for path in (p for p in old_split_locks(paths, old_count) if p.exists()):
        lock = FileLock(str(path), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise old_run_error(paths, path) from None
        lock.release()


def _remove_legacy(out: Path) -> None:
    """qtts 0.1 kept its state at the top of the out dir; --overwrite starts over without it."""
    for pattern in LEGACY_FILES:
        for path in out.glob(pattern):
            path.unlink(missing_ok=True)
