"""Whether a run lock is held, asked without taking it for longer than the question: a dry run
must meet the refusals a run would (lock held: exit 75; another split still running: exit 2)
while writing nothing. The probe opens an existing lock file read-only and never creates one
(a missing lock file is a lock nobody holds). check_no_old_run is the run's own check too
(write_job_files), so the dry run and the run say the same line. Knows lock names; no rows, models.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from qtts.core.errors import UsageError
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.shards import Shard

try:
    import fcntl
except ImportError:  # no flock (Windows): filelock's own probe, on the existing file only
    fcntl = None  # type: ignore[assignment]

_BUSY = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES)


def lock_is_held(path: Path) -> bool:
    """Whether another process holds the flock on `path`; creates and writes nothing. False
    when it cannot tell (an unreadable file, no flock on this file system): the run will say."""
    if not path.exists():
        return False
    if fcntl is None:
        return _held_by_filelock(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        # Shared is enough to see a run's exclusive hold, and two dry runs never see each other.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        return e.errno in _BUSY
    finally:
        os.close(fd)  # drops the shared lock, if taken
    return False


def _held_by_filelock(path: Path) -> bool:
    from filelock import FileLock, Timeout

    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    lock.release()
    return False


def old_split_locks(paths: StatePaths, old_count: int) -> list[Path]:
    """The run locks of an out dir split into `old_count` shards."""
    if old_count == 1:
        return [paths.lock("")]
    return [paths.lock(Shard(old_count, i).suffix) for i in range(old_count)]


def check_no_old_run(paths: StatePaths, old_count: int) -> None:
    """--overwrite may change the shard count only while no run of the old split is going (the
    new split's tasks, starting beside this one, are welcome)."""
    for path in old_split_locks(paths, old_count):
        if lock_is_held(path):
            raise old_run_error(paths, path)


def old_run_error(paths: StatePaths, path: Path) -> UsageError:
    return UsageError(
        f"--overwrite cannot change the shard count while another run "
        f"holds {path.name} in {paths.dir}"
    )
