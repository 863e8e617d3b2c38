"""Exclusive wall time per named part, as a timer on the engine (qtts.core.engine.step.timer).

The caller's stream is synced at each timed part's edges, so a part's time is its own work and
not what was queued before it. The stream, not the device: the vocoder thread's work is not the
part's, and a device-wide sync while that thread captures a CUDA graph is an error. A part's
time excludes the timed parts nested in it, so nested parts are counted once and the parts add
up to the outermost. Parts not asked for are not timed (no sync) and count toward the part
around them.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ms_per_call(fn, device: torch.device, repeats: int) -> float:
    """One call to warm, then the mean of `repeats` calls, synced only at the ends."""
    fn()
    sync(device)
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return (time.perf_counter() - t) / repeats * 1e3


def sync_stream(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


class PartClock:
    def __init__(self, device: torch.device, parts: Iterable[str]):
        self.device, self.parts = device, frozenset(parts)
        self.totals: dict[str, float] = defaultdict(float)  # seconds per part, exclusive
        self._children: list[float] = []  # per open part: time spent in parts nested in it

    def part(self, name: str):
        return self._timed(name) if name in self.parts else nullcontext()

    @contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        sync_stream(self.device)
        start = time.perf_counter()
        self._children.append(0.0)
        try:
            yield
        finally:
            sync_stream(self.device)
            elapsed = time.perf_counter() - start
            self.totals[name] += elapsed - self._children.pop()
            if self._children:
                self._children[-1] += elapsed
