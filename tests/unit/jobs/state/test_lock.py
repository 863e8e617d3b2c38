"""The lock probe answers whether another process holds a run lock without leaving a trace: no
file created where none was, the holder's pid (the next run's message) left as written."""

from __future__ import annotations

import subprocess
import sys

from qtts.core.jobs.state.lock import OutDirLock, holder_pid, lock_is_held

HOLD = """
import sys, time
from qtts.core.jobs.state.lock import OutDirLock
with OutDirLock(__import__("pathlib").Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_missing_lock_is_free_and_stays_missing(tmp_path):
    path = tmp_path / ".qtts" / "run.lock"
    assert not lock_is_held(path)
    assert not path.parent.exists()


def test_a_lock_held_elsewhere_is_seen_and_left_as_it_was(tmp_path):
    path = tmp_path / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        written = path.read_bytes()
        assert lock_is_held(path)
        assert path.read_bytes() == written == f"{holder.pid}\n".encode()
        assert holder_pid(path) == holder.pid
    finally:
        holder.kill()
        holder.wait()
    assert not lock_is_held(path)  # the kernel dropped the dead holder's lock


def test_the_probe_does_not_keep_the_lock(tmp_path):
    path = tmp_path / "run.lock"
    path.touch()
    assert not lock_is_held(path)
    with OutDirLock(path):  # a run starting right after the probe gets its lock
        pass
