"""What `qtts --version` prints: qtts and what it runs on (torch, CUDA, Triton, the other
libraries that shape results, the device found, what --dtype auto picks on this CPU), so a bug
report or a first GPU run says what it ran on. Imports torch only when asked."""

from __future__ import annotations

import platform


def device_found() -> str:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return f"cuda ({', '.join(names)}; CUDA {torch.version.cuda})"
    return f"cpu ({platform.processor() or platform.machine()}; no CUDA device)"


def version_lines(qtts_version: str) -> list[str]:
    from qtts.core.doctor.versions import installed_version

    lines = [f"qtts {qtts_version}", f"python {platform.python_version()}"]
    for dist in ("torch", "triton", "transformers", "pyarrow", "numpy", "ray"):
        lines.append(f"{dist} {installed_version(dist)}")
    lines.append(f"device {device_found()}")
    lines.append(f"--dtype auto on this CPU: {cpu_auto()}")
    return lines


def cpu_auto() -> str:
    """What --dtype auto picks on this CPU and why (an out dir keeps what its first run picked)."""
    from qtts.core.errors import UsageError
    from qtts.core.model.cpu_precision import auto_cpu_precision

    try:
        auto = auto_cpu_precision()
    except UsageError as e:  # a bad QTTS_CPU_BF16: --version still answers
        return f"unknown ({e})"
    return f"{auto.dtype} ({auto.reason})"
