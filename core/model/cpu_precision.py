"""What `--dtype auto` means on a CPU: bfloat16 where the CPU multiplies bf16 natively, float32
elsewhere, with the reason in words.

A CPU with AMX (amx_bf16) or AVX512-BF16 (avx512_bf16) runs oneDNN's bf16 matmuls and
convolutions at 2-6x its fp32 rate, and bf16 halves the bytes every decode step reads. Without
those units oneDNN emulates bf16 with fp32 arithmetic plus conversions: slower than fp32, so auto
keeps fp32 there. The flags come from /proc/cpuinfo (what the kernel says the CPU can do); other
systems and architectures keep fp32. Torch-free: the job layer resolves and pins this before any
model loads (docs/engine-tuning.md, "Precision").
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qtts.core.errors import UsageError

# The x86 flags of native bf16 matrix arithmetic, strongest first.
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
# QTTS_CPU_BF16: "auto" (by the flags), "1" (as if the CPU had them), "0" (auto keeps float32).
# The test suite sets 0, so what it asserts does not depend on the machine it runs on.
KNOB, KNOB_VALUES = "QTTS_CPU_BF16", ("auto", "1", "0")


@dataclass(frozen=True)
class CpuPrecision:
    dtype: str  # "bfloat16" | "float32"
    reason: str  # why, in words: "this CPU multiplies bf16 natively (amx_bf16)"


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux on x86: /proc/cpuinfo's first "flags" line); empty when
    they cannot be read."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return frozenset()
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def read_bf16_knob(env: Mapping[str, str] = os.environ) -> str:
    value = env.get(KNOB, "").strip().lower() or "auto"
    if value not in KNOB_VALUES:
        raise UsageError(f"{KNOB} must be one of {', '.join(KNOB_VALUES)}, got {value!r}")
    return value


def auto_cpu_precision(
    flags: frozenset[str] | None = None, env: Mapping[str, str] = os.environ
) -> CpuPrecision:
    """`--dtype auto` on this CPU (flags: the CPU's feature flags; default cpu_flags())."""
    knob = read_bf16_knob(env)
    if knob != "auto":
        dtype = "bfloat16" if knob == "1" else "float32"
        return CpuPrecision(dtype, f"{KNOB}={knob}")
    flags = cpu_flags() if flags is None else flags
    native = [f for f in BF16_FLAGS if f in flags]
    if native:
        return CpuPrecision("bfloat16", f"this CPU multiplies bf16 natively ({native[0]})")
    if not flags:
        return CpuPrecision("float32", "this CPU's features are unknown here (x86 Linux only)")
    return CpuPrecision("float32", "this CPU has no native bf16 units (no amx_bf16 or avx512_bf16)")
