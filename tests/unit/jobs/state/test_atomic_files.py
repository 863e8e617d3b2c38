"""Atomic files (a write is whole or absent, temps cleaned by owner) and the out dir lock."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from qtts.core.jobs.state.atomic_files import (
    TEMP_MARK,
    atomic_write,
    atomic_write_bytes,
    cleanup_temp_files,
)
from qtts.core.jobs.state.lock import LockHeldError, OutDirLock


def _litter(d):
    return [p.name for p in d.iterdir() if TEMP_MARK in p.name]


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    f = tmp_path / "a.bin"
    atomic_write_bytes(f, b"one")
    atomic_write_bytes(f, b"two")
    assert f.read_bytes() == b"two" and _litter(tmp_path) == []


def test_failed_write_leaves_neither_file_nor_temp(tmp_path):
    def boom(fh):
        fh.write(b"partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError) as failed:
        atomic_write(tmp_path / "a.bin", boom)
    assert list(tmp_path.iterdir()) == []
    assert failed.value.filename == str(tmp_path / "a.bin")  # write() named none: the message does


def test_mode_respects_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_bytes(tmp_path / "a.bin", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.bin").stat().st_mode) == 0o640


def test_cleanup_removes_only_our_temp_files(tmp_path):
    (tmp_path / f".x.wav{TEMP_MARK}1-2").write_bytes(b"")
    (tmp_path / "keep.wav").write_bytes(b"")
    (tmp_path / ".qtts.lock").write_bytes(b"")
    assert cleanup_temp_files(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".qtts.lock", "keep.wav"]


HOLD = """
import sys, time
from pathlib import Path
from qtts.core.jobs.state.lock import OutDirLock
with OutDirLock(Path(sys.argv[1]) / "run.lock"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_lock_held_names_the_pid(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"held"
        with pytest.raises(LockHeldError, match=f"pid {proc.pid}") as info:
            OutDirLock(tmp_path / "run.lock").acquire()
        assert info.value.pid == proc.pid
    finally:
        proc.kill()
        proc.wait()
    with OutDirLock(tmp_path / "run.lock"):  # the kernel released it with the process
        pass
