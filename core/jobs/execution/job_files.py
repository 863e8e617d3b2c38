"""Writing a run into the out dir, under the job lock: the job file (input, shard count, the seed
rule and what --dtype auto means on a CPU, checked again now that no other run can change them
between check and write) and the settings registry. --overwrite with another shard count voids
the old split's state, but only while no other run holds a lock in the out dir; on an out dir of
qtts 0.1 it removes the old state files. Knows the job file, lock files and state names."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from qtts.core.errors import UsageError
from qtts.core.jobs.execution.out_dir import check_output_unchanged
from qtts.core.jobs.output.stores.retract import remove_every_archive
from qtts.core.jobs.state import shard_state as state
from qtts.core.jobs.state.atomic_files import cleanup_temp_files
from qtts.core.jobs.state.jobfile import (
    JOB_LOCK_TIMEOUT_S,
    check_input,
    job_for,
    read_job_file,
    resolve_shard,
    seed_rule_for,
    write_job_file,
)
from qtts.core.jobs.state.lock import old_run_error, old_split_locks
from qtts.core.jobs.state.paths import LEGACY_JOB_FILE, StatePaths
from qtts.core.jobs.state.shards import ShardRequest
from qtts.core.jobs.work.fingerprint import remember
from qtts.core.jobs.work.precision import cpu_auto_for_job_file

SHARED_FILES = ("job.json", "settings.json", "refs.json")  # written under the job lock
if TYPE_CHECKING:
    from qtts.core.jobs.execution.locked_run import RunSetup

LEGACY_FILES = (LEGACY_JOB_FILE, ".qtts-journal*.jsonl", ".qtts*.lock", ".qtts-results.lock")


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
        check_input(
            out,
            recorded,
            spec.kind.value,
            source,
            input_moved=spec.output.input_moved,
            overwrite=spec.output.overwrite,
        )
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
            state.remove_every_shard(out)
        check_output_unchanged(out, spec.output, recorded)  # a switch by another task stands
        new = job_for(spec.kind.value, source, shard, req, spec.columns.renamed)
        if recorded is not None and recorded.num_shards == new.num_shards:
            new = replace(new, array_min=recorded.array_min, array_step=recorded.array_step)
        cpu_auto = setup.precision.cpu_auto if setup.precision is not None else None
        seen = setup.precision.seen if setup.precision is not None else None
        pin = cpu_auto_for_job_file(
            out, recorded, cpu_auto, overwrite=spec.output.overwrite, seen=seen
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
