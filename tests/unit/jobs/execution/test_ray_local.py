"""A local Ray started by qtts dies with its driver: after kill -9 of a driver that called
start_local_ray, none of the Ray processes under it (GCS, raylet, the dashboard and runtime-env
agents that Ray alone leaves running for a minute, workers) is left after a few seconds, and a
second start in the same process adds no second watchdog. Linux (/proc), real Ray, ~10 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")  # in the test extra
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc"),
]

DRIVER = """
import os, time
import ray
from qtts.core.jobs.execution.ray_local import start_local_ray, watch_ray_helpers
start_local_ray(ray, 1)
watch_ray_helpers(ray)  # as a second start in this process would
print("up", flush=True)
time.sleep(600)
"""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start ticks), None when gone: read here, not through the code under test."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (start ticks, command line) of every live process under `root`."""
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        st = _stat(int(name))
        if st is not None and st[0] != "Z":
            children.setdefault(st[1], []).append(int(name))
    found, todo = {}, [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            st = _stat(pid)
            if st is not None:
                found[pid] = (st[2], _cmdline(pid))
                todo.append(pid)
    return found


def running(procs: dict[int, tuple[int, str]]) -> list[str]:
    """Those still running as noted (a zombie holds no memory and is init's to reap)."""
    left = []
    for pid, (start, line) in procs.items():
        st = _stat(pid)
        if st is not None and st[0] != "Z" and st[2] == start:
            left.append(f"{pid} {line[:80]}")
    return left


def test_a_killed_driver_takes_its_ray_helpers_with_it(tmp_path):
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, cwd=tmp_path)  # fmt: skip
    procs: dict[int, tuple[int, str]] = {}
    try:
        assert driver.stdout.readline().strip() == b"up"
        deadline = time.monotonic() + 30  # the raylet starts its agents as it comes up
        while time.monotonic() < deadline:
            procs = descendants(driver.pid)
            titles = {line.split()[0] for _, line in procs.values() if line}
            if {"ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= titles:
                break
            time.sleep(0.2)
        assert {"ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= titles, procs
        watchdogs = [p for p, (_, line) in procs.items() if "ray_local.py" in line]
        assert len(watchdogs) == 1, procs
        time.sleep(3)  # the watchdog notes the helpers every half second (a busy box: slower)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 10  # Ray alone leaves the agents for ~60 s
        while running(procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert running(procs) == []
    finally:
        driver.kill()
        driver.wait()
        for pid in procs:  # never leak a cluster from a failed run of this test
            if running({pid: procs[pid]}):
                os.kill(pid, signal.SIGKILL)
