"""Starting a local Ray cluster for one qtts driver, its helper processes bound to the driver.

ray.init starts the GCS and raylet tied to the driver by the kernel, but the raylet's agents
outlive a driver killed with SIGKILL by about a minute (qtts.core.jobs.execution.ray_reaper says
why). So beside the cluster runs a watchdog, in a session of its own (a signal to the driver's
process group leaves it be), that ends them once the driver is gone. One watchdog a process,
however often Ray is started in it. Where there is no /proc (not Linux) Ray runs as before.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

log = logging.getLogger("qtts")

REAPER = Path(__file__).with_name("ray_reaper.py")
_watchdog: subprocess.Popen | None = None  # its stdin's write end must live as long as we do


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
            [sys.executable, "-I", "-S", str(REAPER), str(os.getpid()), ray_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:  # the job runs; only a kill -9 would leave the agents for a minute
        log.warning("cannot start the watchdog of the local Ray's helpers: %s", e)
