"""Atomic files, audio/codes encoding, the stale files a redone row removes, the lock."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from qtts.core.jobs.output import writer
from qtts.core.jobs.output.writer import (
    TEMP_MARK,
    DiskFullError,
    OutputWriter,
    WriteJob,
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


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_audio_roundtrip_16bit(tmp_path, fmt):
    audio = (0.5 * np.sin(np.linspace(0, 100, 4800))).astype(np.float32)
    audio[0] = 3.0  # out of range: clipped, not wrapped
    w = OutputWriter(tmp_path, fmt)
    codes = np.arange(32, dtype=np.int64).reshape(2, 16)
    name = w.submit(WriteJob("u1", audio, 24000, codes)).result()
    w.close()
    assert name == f"u1.{fmt}"
    data, sr = sf.read(tmp_path / name, dtype="float32")
    assert sr == 24000 and sf.info(str(tmp_path / name)).subtype == "PCM_16"
    assert np.max(np.abs(data[1:] - audio[1:])) < 1e-4 and data[0] > 0.99
    np.testing.assert_array_equal(np.load(tmp_path / "u1.codes.npy"), codes)
    assert sf.info(str(tmp_path / name)).frames == 4800


def test_disk_full_is_its_own_error(tmp_path, monkeypatch):
    def full(path, data, *rest):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "atomic_write_bytes", full)
    w = OutputWriter(tmp_path, "wav")
    fut = w.submit(WriteJob("u1", np.zeros(10, np.float32), 24000, None))
    with pytest.raises(DiskFullError, match="disk full writing"):
        fut.result()
    w.close()


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
