"""A local Ray cluster bound to its qtts driver, and its watchdog (this file, run as a script).

Ray binds its GCS and raylet to the driver, but the raylet's agents (ray::DashboardAgent and
ray::RuntimeEnvAgent, ~85 MB each) outlive a driver killed with SIGKILL by a minute, waiting out
a timeout on the dead GCS: a cron job killed more often piles them up. So beside the cluster
runs a watchdog, in a session of its own (a signal to the driver's group leaves it be), one a
process: it notes the driver's Ray descendants (pid and start time) and, once the driver is gone
(its end of our stdin closes, or its pid dies), sends them SIGTERM, then SIGKILL. Only processes
it saw under the driver with the start time it saw are signalled: never another cluster, never
a reused pid. Linux (/proc) only; elsewhere Ray runs as it would. The script runs with -I -S:
standard library only, neither qtts nor Ray.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from types import ModuleType

log = logging.getLogger("qtts")

_watchdog: subprocess.Popen | None = None  # its stdin's write end must live as long as we do

POLL_S = 0.5  # how often the driver's descendants are noted (and its liveness checked)
GRACE_S = 1.0  # SIGTERM -> SIGKILL (the runtime env agent, waiting on the dead GCS, needs it)


def start_local_ray(ray: ModuleType, num_cpus: int) -> None:
    """ray.init of a cluster of this machine only, with the watchdog on its helpers."""
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    watch_ray_helpers(ray)


def watch_ray_helpers(ray: ModuleType) -> None:
    """Start the watchdog unless one already watches this process."""
    global _watchdog
    if _watchdog is not None and _watchdog.poll() is None:
        return
    if not Path("/proc/self/stat").exists():
        return
    ray_dir = str(Path(ray.__file__).resolve().parent)
    try:
        _watchdog = subprocess.Popen(
            # -I -S: the standard library only, nothing of PYTHONPATH or site-packages
            [sys.executable, "-I", "-S", str(Path(__file__).resolve()), str(os.getpid()), ray_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:  # the job runs; only a kill -9 would leave the agents for a minute
        log.warning("cannot start the watchdog of the local Ray's helpers: %s", e)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in clock ticks) from /proc/PID/stat, or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # after "(comm)", which may hold spaces
    return fields[0].decode(), int(fields[1]), int(fields[19])


def _start(pid: int) -> int | None:
    """The start time of a live (not zombie) process, or None."""
    st = _stat(pid)
    return None if st is None or st[0] in ("Z", "X") else st[2]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ray_descendants(driver: int, ray_dir: str) -> dict[int, int]:
    """pid -> start time of the driver's descendants that are Ray's: binaries and scripts under
    the ray package, or processes titled ray::NAME (agents, workers)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[0] not in ("Z", "X"):
                children.setdefault(st[1], []).append((int(name), st[2]))
    found, todo = {}, [driver]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            todo.append(pid)
            line = _cmdline(pid)
            if pid != os.getpid() and (line.startswith("ray::") or ray_dir in line):
                found[pid] = start
    return found


def reap(helpers: dict[int, int]) -> None:
    """SIGTERM, then SIGKILL after GRACE_S, to those still running as they were noted."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [pid for pid, start in helpers.items() if _start(pid) == start]
        for pid in alive:
            with suppress(OSError):  # gone meanwhile
                os.kill(pid, sig)
        deadline = time.monotonic() + GRACE_S
        while sig == signal.SIGTERM and time.monotonic() < deadline:
            if all(_start(pid) != helpers[pid] for pid in alive):
                return
            time.sleep(0.05)


def watch(driver: int, ray_dir: str) -> None:
    """Note the driver's Ray descendants until the driver is gone; then reap them."""
    born = _start(driver)
    helpers: dict[int, int] = {}
    while born is not None:
        ready, _, _ = select.select([0], [], [], POLL_S)
        if ready and not os.read(0, 4096):  # EOF: the driver closed its end (exit or death)
            break
        seen = ray_descendants(driver, ray_dir)
        if _start(driver) != born:  # died during the scan: its children may be reparented
            break
        helpers = seen
    reap(helpers)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
