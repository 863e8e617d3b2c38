"""The precision a job runs in, settled before the lock: --device and --dtype as the TextModel
resolves them, except that `--dtype auto` on a CPU keeps what the out dir's first run resolved it
to (`cpu_auto_dtype` in .qtts/job.json). The precision is in every row's fingerprint, so without
the pin a rerun or a shard on a CPU of another kind (with or without native bf16) would redo
rows that were fine. An explicit --dtype runs as given and leaves the pin alone; --overwrite
resolves afresh. record_job writes the pin under the job lock. Torch-free: the CPU's capability
comes from the TextModel. See docs/job-state.md and docs/engine-settings.md, "Precision".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from qtts.core.errors import UsageError
from qtts.core.jobs.interfaces import TextModel
from qtts.core.jobs.jobfile import JobFile

log = logging.getLogger("qtts")


@dataclass(frozen=True)
class Precision:
    device: str  # "cpu" | "cuda"
    dtype: str  # what runs: "float32" | "bfloat16" | "float16"
    why: str  # in words, for the log line
    cpu_auto: str | None  # set when this run resolved --dtype auto on a CPU: the pin to record

    def __str__(self) -> str:
        return f"{self.device}:{self.dtype}"  # the fingerprint's spelling: "cpu:bfloat16"


def settle_precision(model: TextModel, device: str, dtype: str, recorded: JobFile | None,
                     *, overwrite: bool) -> Precision:  # fmt: skip
    """What this run computes in; UsageError when the device is not available."""
    kind, resolved, why = model.resolve_precision(device, dtype)
    if dtype != "auto":
        return Precision(kind, resolved, f"--dtype {dtype}", None)
    if kind != "cpu":
        return Precision(kind, resolved, f"--dtype auto: {why}", None)
    pinned = None if recorded is None or overwrite else recorded.cpu_auto_dtype
    if pinned is None:
        return Precision(kind, resolved, f"--dtype auto: {why}", resolved)
    said = "--dtype auto, as this out dir first resolved it (.qtts/job.json)"
    if pinned != resolved:  # shards on mixed CPUs: all run what the first one resolved
        said += f"; this CPU alone would pick {resolved}: {why}"
    return Precision(kind, pinned, said, pinned)


def log_precision(precision: Precision) -> None:
    log.info("precision: %s %s (%s)", precision.device, precision.dtype, precision.why)


def cpu_auto_to_record(out, recorded: JobFile | None, cpu_auto: str | None,
                       *, overwrite: bool) -> str | None:  # fmt: skip
    """The job file's cpu_auto_dtype after this run (under the job lock): the pin it holds, or
    this run's when it resolved --dtype auto on a CPU and none is recorded (or --overwrite
    resolved it afresh). A different pin recorded since this run read the job file is another
    run's, started at the same moment."""
    held = None if recorded is None else recorded.cpu_auto_dtype
    if cpu_auto is None:  # an explicit --dtype, or a GPU: the pin stays as it is
        return held
    if held is None or held == cpu_auto or overwrite:
        return cpu_auto
    raise UsageError(f"{out} was just recorded with --dtype auto = {held} on CPU by another run; "
                     "run again to join it")  # fmt: skip
