"""One run per out dir (per shard of it): an exclusive, non-blocking filelock on OUT/.qtts/run.lock
(run-shard-I-of-N.lock for shard I of N, so shards share the dir; qtts.core.jobs.state.paths).

A second run names the holder's pid: Linux's /proc/locks says who holds the flock; elsewhere the
pid the holder wrote into the lock file is used. The lock is
released by the kernel if the holder dies, so a kill -9 never leaves the dir locked.
Knows nothing of jobs or models.
"""

from __future__ import annotations

import os
from pathlib import Path

from qtts.core.errors import LockHeldError as HeldError


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
        try:
            with open(self.path, "r+", encoding="ascii") as f:
                f.write(f"{os.getpid()}\n")
                f.truncate()
        except OSError:
            pass  # the pid is a courtesy for the next run's message

    def release(self) -> None:
        if self._lock.is_locked:
            try:
                os.truncate(self.path, 0)  # no stale pid for the next run's message
            except OSError:
                pass
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
