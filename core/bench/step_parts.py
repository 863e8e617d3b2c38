"""One decode step split into parts that add up to it.

Timing each part in its own loop (predictor alone, sampler alone) gives numbers that do not sum to
the step: caches warm differently and the parts overlap. Here the parts are timed inside the same
steps: each part is wrapped, the device is synced at its edges, and a part's time excludes the
parts nested in it (the predictor's sampling counts as sampling). "other" is the measured rest of
the step (embeddings, the codec head, slot bookkeeping), so the parts sum to the instrumented step
exactly. The syncs make that step a little slower than a plain one; both are reported.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import ExitStack
from unittest import mock

import torch

PARTS = ("talker_stack", "predictor", "sampling", "other")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PartClock:
    """Exclusive wall time per named part across nested calls."""

    def __init__(self, device: torch.device):
        self.device = device
        self.totals: dict[str, float] = defaultdict(float)
        self._children: list[float] = []  # per open part: time spent in parts nested in it

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            _sync(self.device)
            start = time.perf_counter()
            self._children.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                _sync(self.device)
                elapsed = time.perf_counter() - start
                nested = self._children.pop()
                self.totals[name] += elapsed - nested
                if self._children:
                    self._children[-1] += elapsed

        return timed


def step_parts(engine, view_len: int, repeats: int = 5) -> dict[str, float]:
    """ms per part of one eager decode step (every slot active), averaged over `repeats` steps,
    plus "instrumented_step": their sum. Runs the engine's own decode_step with its parts wrapped."""
    from qtts.core.engine import engine as engine_module

    device = engine.state.c0.device
    clock = PartClock(device)
    with ExitStack() as patches:
        patches.enter_context(mock.patch.object(
            engine, "talker_step", clock.wrap("talker_stack", engine.talker_step)))  # fmt: skip
        patches.enter_context(mock.patch.object(
            engine, "_predict_codes", clock.wrap("predictor", engine._predict_codes)))  # fmt: skip
        patches.enter_context(mock.patch.object(
            engine_module, "choose_tokens", clock.wrap("sampling", engine_module.choose_tokens)))  # fmt: skip
        step = clock.wrap("other", engine.decode_step)
        step(view_len)  # warm-up: allocations and first-call costs stay out of the split
        clock.totals.clear()
        for _ in range(repeats):
            step(view_len)
    out = {part: round(clock.totals[part] / repeats * 1e3, 3) for part in PARTS}
    out["instrumented_step"] = round(sum(out.values()), 3)
    return out
