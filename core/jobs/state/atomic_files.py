"""A file written into an out dir whole or not at all (a temp file in the same folder, fsync,
os.replace), and the temp files a kill leaves (removed by the next run) or an immediate exit
abandons. Every file qtts writes in an out dir goes through here.
Knows files and folders; no formats, rows or names besides the temp mark."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterable
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

TEMP_MARK = ".qtts-tmp-"
_counter = itertools.count()
_live_temps: set[str] = set()
_live_lock = threading.Lock()


def atomic_write(
    final: Path, write: Callable[[BinaryIO], None], before_replace: Callable[[], None] | None = None
) -> None:
    """Write `final` through a temp file in the same folder: whole file or nothing.
    before_replace runs once the temp file is durable, just before it takes the final name (the job
    journals the row there, so no finished file ever lacks its journal line)."""
    tmp = temp_path(final)
    with tracked(tmp):
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            if before_replace is not None:
                before_replace()
            os.replace(tmp, final)
        except BaseException as e:
            unlink_quietly(tmp)
            if isinstance(e, OSError) and e.filename is None and e.strerror:
                e.filename = str(final)  # a failed write or fsync names no file (a full disk)
            raise


def temp_path(final: Path) -> Path:
    """Where `final` is written before it takes its name: unique, hidden, in the same folder."""
    return final.parent / f".{final.name}{TEMP_MARK}{os.getpid()}-{next(_counter)}"


@contextmanager
def tracked(tmp: Path):
    """While inside, `tmp` is a live temp file: an immediate exit removes it."""
    with _live_lock:
        _live_temps.add(str(tmp))
    try:
        yield tmp
    finally:
        with _live_lock:
            _live_temps.discard(str(tmp))


def atomic_write_bytes(
    final: Path, data: bytes, before_replace: Callable[[], None] | None = None
) -> None:
    atomic_write(final, lambda f: f.write(data), before_replace)


def fsync_dir(path: Path) -> None:
    """Make renames inside `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def cleanup_temp_files(
    out_dir: Path,
    owns: Callable[[str], bool] = lambda final: True,
    names: Iterable[str] | None = None,
) -> int:
    """Remove temp files a killed run left whose final name `owns` accepts (names: a listing's)."""
    removed = 0
    if names is None:
        names = [p.name for p in out_dir.glob(f".*{TEMP_MARK}*")]
    for name in names:
        final = name[1 : name.index(TEMP_MARK)]
        if owns(final) and (out_dir / name).is_file():
            unlink_quietly(out_dir / name)
            removed += 1
    return removed


def remove_live_temps() -> None:
    """Best effort, for an immediate exit: remove the temp files being written right now."""
    with _live_lock:
        paths = list(_live_temps)
    for p in paths:
        unlink_quietly(Path(p))


def unlink_quietly(path: Path) -> None:
    with suppress(OSError):
        os.unlink(path)
