"""The out dir's folder for job state (OUT/.qtts): made by a run, or, for --dry-run, checked
without making anything, each refusal a UsageError (exit 2) in the run's own words.
Knows paths and permissions; no jobs.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from qtts.core.errors import UsageError


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
