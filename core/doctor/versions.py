"""What the install runs on: python, torch, triton, CUDA runtime and driver, the device and its
memory, and on a CPU what --dtype auto picks there. Information only: always ok (a missing piece
shows as "not installed" or "unknown")."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata

import torch

from qtts.core.doctor.runner import Check, DoctorRun
from qtts.core.engine.plan.planner import GIB
from qtts.core.errors import UsageError
from qtts.core.model.cpu_precision import auto_cpu_precision


def installed_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _driver() -> str:
    """The NVIDIA driver as nvidia-smi reports it; torch knows only the CUDA API it supports."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else "unknown"


def _cpu_auto() -> dict[str, str | None]:
    """What --dtype auto picks on this CPU, and why (core/model/cpu_precision.py)."""
    try:
        auto = auto_cpu_precision()
    except UsageError as e:  # a bad QTTS_CPU_BF16: information only, the check stays ok
        return {"cpu_auto_dtype": None, "cpu_auto_reason": str(e)}
    return {"cpu_auto_dtype": auto.dtype, "cpu_auto_reason": auto.reason}


def versions(run: DoctorRun) -> Check:
    figures = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": installed_version("triton"),
        "qtts": installed_version("qtts"),
    }
    if run.cuda:
        props = torch.cuda.get_device_properties(run.device)
        figures |= {
            "cuda_runtime": torch.version.cuda,
            "driver": _driver(),
            "device": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / GIB, 1),
        }
    else:
        pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        figures |= {
            "cuda_runtime": torch.version.cuda or "none (CPU build)",
            "device": f"cpu ({platform.processor() or platform.machine()})",
            "cpu_threads": torch.get_num_threads(),
            "memory_gib": round(pages * os.sysconf("SC_PAGE_SIZE") / GIB, 1) if pages else None,
        } | _cpu_auto()
    keys = ("device", "torch", "triton", "cuda_runtime", "driver")
    detail = ", ".join(f"{k} {figures[k]}" for k in keys if k in figures)
    return Check("versions", "ok", detail, figures)
