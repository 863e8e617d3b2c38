"""How a synthesis job shares a CPU: one thread budget for decoding and the vocoder, and an
allocator that keeps its large blocks.

Threads. Decoding and the speech decoder (vocoder) are both compute-bound on a CPU, and torch's
thread count is one number for the whole process (torch.set_num_threads from any thread sets it
for all). Three ways to share the cores, measured with `qtts bench` (QTTS_CPU_THREADS picks one;
docs/engine-tuning.md has the figures):
- "overlap": the vocoder on its own thread beside decoding, both with every core: twice as many
  busy threads as cores, and OpenMP teams that wait on each other's cores.
- "split": the same two threads with half the cores each: no oversubscription, but a phase with
  nothing to do leaves its half idle (the end of a job, or a decoder that keeps up easily).
- "serial": the vocoder on the decode thread after each finished group, every core to each phase
  in turn: no oversubscription and no idle half; the decode loop waits while audio is made.
The default is the one that measured fastest ("auto": AUTO_POLICY).

Allocator. glibc serves blocks above a threshold (at most 32 MB) with fresh mmap()s and returns
them on free, so each of the vocoder's large activations (a row's last stages are tens of MB)
page-faults in again on every call: measured as a third of a CPU job's time spent in the kernel.
`keep_large_blocks` tells glibc to serve every size from its heap and keep what is freed, so the
same blocks are reused; the price is a higher peak RSS (the heap does not shrink), which
`qtts bench` reports. Knows threads and the C allocator; no tensors beyond torch's thread count.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from qtts.core.engine.device.knobs import read_knobs

log = logging.getLogger("qtts")

POLICIES = ("serial", "split", "overlap")
# Serial on every core count. Measured on 2 cores (docs/engine-tuning.md): serial 1.05-1.10
# audio-s/s, overlap 0.84-0.93, split 0.53. Both phases are compute-bound, so overlap only adds
# oversubscription, and split idles half the cores whenever one phase waits; more cores make a
# 16-row product scale worse per thread, which favours split there, but that has not been
# measured yet: QTTS_CPU_THREADS=split is the one to try on a many-core CPU.
AUTO_POLICY = "serial"
# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_KEEP_FREED_BYTES = 2**31 - 1  # (a C int) keep freed heap: trim only past 2 GiB free on top
# The threads torch starts with (OMP_NUM_THREADS, else the CPUs this process may run on), read
# when this module is imported: later, tests and the doctor lower it for their own reasons.
STARTING_THREADS = torch.get_num_threads()


@dataclass(frozen=True)
class CpuBudget:
    policy: str  # one of POLICIES
    threads: int  # torch's intra-op threads while synthesizing
    vocoder_thread: bool  # the vocoder beside decoding (True) or after each group, inline

    def describe(self) -> str:
        where = "beside decoding" if self.vocoder_thread else "after each group, inline"
        return f"{self.policy}: {self.threads} thread(s) per phase, vocoder {where}"


def cpu_budget(cores: int | None = None, env: Mapping[str, str] = os.environ) -> CpuBudget:
    """The budget QTTS_CPU_THREADS names (auto: AUTO_POLICY) over `cores` (default: all)."""
    cores = STARTING_THREADS if cores is None else cores
    policy = read_knobs(env).cpu_threads
    policy = AUTO_POLICY if policy == "auto" else policy
    if policy == "split":
        return CpuBudget(policy, max(1, cores // 2), True)
    return CpuBudget(policy, cores, policy == "overlap")


def describe_cpu_budget(env: Mapping[str, str] = os.environ, kept: bool | None = None) -> str:
    """This CPU's budget in words, for `qtts bench` and the job log (kept: whether
    apply_cpu_budget kept large blocks; None: whether the budget asks it to)."""
    budget = cpu_budget(env=env)
    knob = read_knobs(env).cpu_threads
    kept = not budget.vocoder_thread if kept is None else kept
    blocks = "large blocks kept" if kept else "allocator as is"
    return (
        f"threads {budget.describe()} (QTTS_CPU_THREADS={knob}, {STARTING_THREADS} cores); {blocks}"
    )


def set_threads(threads: int) -> None:
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def apply_cpu_budget(threads: int | None, vocoder_thread: bool) -> bool:
    """A CPU job's process tuning (EngineTuning.threads and .vocoder_thread; threads None: a
    GPU job, nothing to do): torch's thread count, and with one working thread the allocator
    (with two, both allocate large blocks from glibc's main heap: measured no faster, with more
    time in the kernel). For job processes only (Synthesizer.load, `qtts bench`), once the
    weights are loaded, so their load's temporaries are not kept. Process-wide and idempotent;
    True when large blocks are kept."""
    if threads is None:
        return False
    set_threads(threads)
    return not vocoder_thread and keep_large_blocks()


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"))
    except (OSError, TypeError):
        return None


@functools.lru_cache(maxsize=1)
def keep_large_blocks() -> bool:
    """Serve large blocks from glibc's heap and keep freed memory (see the module docstring);
    False where the C library is not glibc or refuses (nothing changes there)."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    ok = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED_BYTES) == 1
    if not ok:
        log.debug("mallopt refused: large blocks keep glibc's defaults")
    return ok


def trim_heap() -> None:
    """Give the heap's free pages back to the kernel (glibc malloc_trim: the free middle of the
    heap too, not only its top), where large blocks are kept: called between a job's chunks, so
    blocks are reused within one but the heap's high-water mark does not outlive it."""
    if keep_large_blocks.cache_info().currsize and keep_large_blocks():
        trim = getattr(_libc(), "malloc_trim", None)
        if trim is not None:
            trim(0)
