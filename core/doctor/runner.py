"""A check's result, the run every check reads (device, size, what one check measured for the
next), and the runner: each check isolated, so one that raises is one failed line, never a
traceback, and the checks after it still run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field

import torch

from qtts.core.engine.loop.graphs import capture_broken

OK, FAILED, SKIPPED = "ok", "failed", "skipped"


@dataclass
class Check:
    name: str
    status: str  # ok | failed | skipped
    detail: str  # one line: what held, what did not, or why it was skipped
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    def row(self) -> dict:
        return asdict(self)


@dataclass
class DoctorRun:
    device: torch.device
    size: str  # model dimensions: 0.6b, 1.7b (published) or small
    measured: dict = field(default_factory=dict)  # shared between checks (the measured machine)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def verdict(name: str, held: bool, detail: str, figures: dict | None = None) -> Check:
    return Check(name, OK if held else FAILED, detail, figures or {})


def skipped(name: str, reason: str) -> Check:
    return Check(name, SKIPPED, reason)


def bf16_not_here(run: DoctorRun) -> str | None:
    """Why the bf16 checks do not apply to this run (None: they do). bf16 is what `--dtype auto`
    runs on CUDA, and on a CPU that multiplies bf16 natively (core/model/cpu_precision.py)."""
    if run.cuda:
        return None
    from qtts.core.model.cpu_precision import auto_cpu_precision

    choice = auto_cpu_precision()
    if choice.dtype == "bfloat16":
        return None
    return f"this CPU runs float32 under --dtype auto ({choice.reason})"


def one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


CheckFn = Callable[[DoctorRun], Check]


def run_checks(checks: Iterable[tuple[str, CheckFn]], run: DoctorRun) -> Iterator[Check]:
    """Each check's result as it finishes; an exception is that check failing with its reason."""
    for name, fn in checks:
        start = time.perf_counter()
        try:
            result = fn(run)
        except Exception as exc:  # noqa: BLE001 -- a broken check is a failed check, not a crash
            result = Check(name, FAILED, one_line(exc))
            if run.cuda and isinstance(exc, torch.OutOfMemoryError) and capture_broken() is None:
                torch.cuda.empty_cache()  # (never after a broken capture: engine.graphs)
        result.seconds = round(time.perf_counter() - start, 2)
        yield result


def all_held(checks: Iterable[Check]) -> bool:
    """The exit rule: every check ok or skipped."""
    return all(c.status != FAILED for c in checks)
