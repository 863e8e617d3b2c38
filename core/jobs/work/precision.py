"""The precision a job runs in: --device and --dtype as the TextModel resolves them, but `--dtype
auto` on a CPU as the out dir pinned it (docs/job-state.md, "`--dtype auto` on a CPU is pinned").
Torch-free: the CPU's capability comes from the TextModel."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.state.jobfile import JobFile

log = logging.getLogger("qtts")


@dataclass(frozen=True)
class Precision:
    device: str  # "cpu" | "cuda"
    dtype: str  # what runs: "float32" | "bfloat16" | "float16"
    why: str  # in words, for the log line
    cpu_auto: str | None  # set when this run resolved --dtype auto on a CPU: the pin to record
    seen: str | None = None  # the pin the out dir held when this run settled (before the lock)
    emulated: bool = False  # a pinned bf16 on a CPU without bf16 units: emulated, much slower

    def __str__(self) -> str:
        return f"{self.device}:{self.dtype}"  # the fingerprint's spelling: "cpu:bfloat16"


def settle_precision(
    model: TextModel, device: str, dtype: str, recorded: JobFile | None, *, overwrite: bool
) -> Precision:
    """What this run computes in; UsageError when the device is not available."""
    kind, resolved, why = model.resolve_precision(device, dtype)
    seen = None if recorded is None else recorded.cpu_auto_dtype
    if dtype == "auto" and kind == "cpu":
        return replace(_cpu_auto(kind, resolved, why, recorded, overwrite), seen=seen)
    said = f"--dtype {dtype}" if dtype != "auto" else f"--dtype auto: {why}"
    return Precision(kind, resolved, said, None)


def _cpu_auto(
    kind: str, resolved: str, why: str, recorded: JobFile | None, overwrite: bool
) -> Precision:
    pinned = None if recorded is None or overwrite else recorded.cpu_auto_dtype
    if pinned is None:
        return Precision(kind, resolved, f"--dtype auto: {why}", resolved)
    said = "--dtype auto, as this out dir first resolved it (.qtts/job.json)"
    if pinned != resolved:  # shards on mixed CPUs: all run what the first one resolved
        said += f"; this CPU alone would pick {resolved}: {why}"
    emulated = pinned == "bfloat16" and resolved == "float32"
    return Precision(kind, pinned, said, pinned, emulated=emulated)


def for_ray_actors(precision: Precision) -> Precision:
    """`--backend ray --device auto`: each actor resolves --dtype auto on its own device and
    nothing is pinned; the fingerprint spells it cpu:float32, as qtts always has on a driver
    without a GPU (docs/job-state.md, "`--dtype auto` on a CPU is pinned")."""
    if precision.device != "cpu" or precision.cpu_auto is None:
        return replace(precision, cpu_auto=None)
    why = "--dtype auto, resolved by each Ray actor on its own device"
    return Precision("cpu", "float32", why, None)


def log_precision(precision: Precision) -> None:
    line = f"precision: {precision.device} {precision.dtype} ({precision.why})"
    if precision.emulated:  # same results as the other shards, at a fraction of their speed
        log.warning(
            "%s; this CPU emulates bf16, slowly (--dtype float32 runs fp32 instead, "
            "and redoes the rows made in bf16)",
            line,
        )
    else:
        log.info("%s", line)


def cpu_auto_for_job_file(
    out: Path,
    recorded: JobFile | None,
    cpu_auto: str | None,
    *,
    overwrite: bool,
    seen: str | None = None,
) -> str | None:
    """The job file's cpu_auto_dtype after this run (under the job lock): the pin it holds, or
    this run's where none is (or --overwrite resolved it afresh). A pin another run recorded since
    this one read the job file (`seen`) refuses: shards on mixed CPUs must not each pin theirs."""
    held = None if recorded is None else recorded.cpu_auto_dtype
    if cpu_auto is None:  # an explicit --dtype, or a GPU: the pin stays as it is
        return held
    if held is None or held == cpu_auto or (overwrite and held == seen):
        return cpu_auto
    raise UsageError(
        f"{out} was just recorded with --dtype auto = {held} on CPU by another run; "
        "run again to join it"
    )
