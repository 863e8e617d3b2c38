"""The watchdog of a local Ray cluster, run as a script beside its driver (qtts.core.jobs.execution.
ray_local): when the driver dies, even by kill -9, it ends the Ray processes the driver started.

Ray binds its GCS and raylet to the driver (the kernel kills them with it), but the raylet's own
children, ray::DashboardAgent and ray::RuntimeEnvAgent (~85 MB each), outlive it: on losing the
raylet they try to report to the dead GCS and wait out a 60 s timeout, reparented to init, so a
cron job killed more often than that piles them up. The watchdog notes the driver's Ray
descendants (pid and start time) while the driver lives, and once it is gone (its end of our
stdin closes, or its pid dies) sends them SIGTERM, then SIGKILL to any left after a grace period.
Only processes it saw under the driver, still with the start time it saw, are signalled: never a
cluster someone else started, never a reused pid. Linux (/proc); standard library only, so it
starts in milliseconds and imports neither qtts nor Ray.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

POLL_S = 0.5  # how often the driver's descendants are noted (and its liveness checked)
GRACE_S = 1.0  # SIGTERM -> SIGKILL (the runtime env agent, waiting on the dead GCS, needs it)


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
            try:
                os.kill(pid, sig)
            except OSError:  # gone meanwhile
                pass
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
