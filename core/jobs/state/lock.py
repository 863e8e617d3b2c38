"""One run per out dir (per shard of it): an exclusive, non-blocking flock on a run lock; a second
run names the holder's pid, and the kernel frees the lock if its holder dies. lock_is_held asks
without creating or taking the lock, so a dry run meets the refusals a run would (lock held: exit
75; another split still running: exit 2) and writes nothing. Knows lock names; no rows."""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import suppress
from pathlib import Path

from qtts.core.errors import LockHeldError as HeldError
from qtts.core.errors import UsageError
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.shards import Shard


class LockHeldError(HeldError):
    """Another run holds the out dir's lock (exit 75)."""

    def __init__(self, path: Path, pid: int | None) -> None:
        holder = f"pid {pid}" if pid else "another process (pid unknown)"
        super().__init__(f"{path} is held by {holder}: another qtts run is using this out dir")
        self.pid = pid


class OutDirLock:
    """Context manager: acquire at once or raise LockHeldError."""

    def __init__(self, path: Path) -> None:
        from filelock import FileLock

        self.path = path
        self._lock = FileLock(str(self.path), timeout=0)

    def acquire(self) -> None:
        from filelock import Timeout

        try:
            self._lock.acquire()
        except Timeout:
            raise LockHeldError(self.path, holder_pid(self.path)) from None
        with suppress(OSError), open(self.path, "r+", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")  # a courtesy for the next run's message
            f.truncate()

    def release(self) -> None:
        if self._lock.is_locked:
            with suppress(OSError):
                os.truncate(self.path, 0)  # no stale pid for the next run's message
            self._lock.release()

    def __enter__(self) -> OutDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder_pid(path: Path) -> int | None:
    """The pid holding the lock: from /proc/locks (Linux), else from the file, else None."""
    pid = _pid_from_proc_locks(path)
    if pid is not None:
        return pid
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _pid_from_proc_locks(path: Path) -> int | None:
    try:
        inode = os.stat(path).st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF"
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK":
            try:
                pid, ino = int(parts[4]), int(parts[5].rsplit(":", 1)[1])
            except (ValueError, IndexError):
                continue
            if ino == inode and pid != os.getpid():
                return pid
    return None


_BUSY = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES)


def lock_is_held(path: Path) -> bool:
    """Whether another process holds the flock on `path`; creates and writes nothing. False
    when it cannot tell (an unreadable file, no flock on this file system): the run will say."""
    if not path.exists():
        return False
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


def old_split_locks(paths: StatePaths, old_count: int) -> list[Path]:
    """The run locks of an out dir split into `old_count` shards."""
    return [paths.lock(Shard(old_count, i).suffix) for i in range(old_count)]


def check_no_old_run(paths: StatePaths, old_count: int) -> None:
    """--overwrite changes the shard count only while no run of the old split is going."""
    for path in old_split_locks(paths, old_count):
        if lock_is_held(path):
            raise old_run_error(paths, path)


def old_run_error(paths: StatePaths, path: Path) -> UsageError:
    return UsageError(
        f"--overwrite cannot change the shard count while another run "
        f"holds {path.name} in {paths.dir}"
    )
