"""One decode step split into parts that add up to it.

Timing each part in its own loop (predictor alone, sampler alone) gives numbers that do not sum to
the step: caches warm differently and the parts overlap. Here the parts are timed inside the same
steps, through the engine's timer hook (qtts.core.engine.step.timer) and a PartClock: the device is
synced at each part's edges, and a part's time excludes the parts nested in it (the predictor's
sampling counts as sampling). "other" is the measured rest of the step (embeddings, the codec head,
slot bookkeeping). "instrumented_step" is timed on its own clock around the same steps, so the
parts adding up to it (less the timer's own overhead) is a check, not a definition. The syncs make
that step a little slower than a plain one; both are reported.
"""

from __future__ import annotations

import time

from qtts.core.bench.part_clock import PartClock, sync

PARTS = ("talker_stack", "predictor", "sampling", "other")
# The engine's part behind each reported one: "other" is the step's own (exclusive) time.
ENGINE_PARTS = {
    "talker_stack": "talker_stack",
    "predictor": "predictor",
    "sampling": "sampling",
    "other": "decode_step",
}


def step_parts(engine, view_len: int, repeats: int = 5) -> dict[str, float]:
    """ms per part of one eager decode step (every slot active), averaged over `repeats` steps,
    plus "instrumented_step": the wall time of those steps. The engine's timer is put back."""
    device = engine.state.c0.device
    clock = PartClock(device, ENGINE_PARTS.values())
    saved, engine.timer = engine.timer, clock
    try:
        engine.decode_step(view_len)  # warm-up: allocations and first-call costs stay out
        clock.totals.clear()
        sync(device)
        start = time.perf_counter()
        for _ in range(repeats):
            engine.decode_step(view_len)
        sync(device)
        wall = time.perf_counter() - start
    finally:
        engine.timer = saved
    out = {part: round(clock.totals[ENGINE_PARTS[part]] / repeats * 1e3, 3) for part in PARTS}
    out["instrumented_step"] = round(wall / repeats * 1e3, 3)
    return out
