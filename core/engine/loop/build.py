"""One way to assemble an engine: slot state, the Engine, and its decode graphs when the tuning
replay graphs. `qtts batch` (one engine per memory-plan pass), `qtts bench` and the launch counter
all build here, so what the bench measures and counts is what a job runs. Knows shapes, tuning
and the model; no text, no files.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

import torch

from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.loop.engine import Engine
from qtts.core.engine.loop.graphs import GraphCaptureError, GraphedDecodeStep, capture_broken
from qtts.core.engine.step.slots import SlotState
from qtts.core.engine.step.views import aligned_kv_len
from qtts.core.model.config import ModelConfig, SamplingParams


@dataclass(frozen=True)
class EngineShape:
    slots: int
    kv_len: int  # KV positions per slot
    max_frames: int
    max_trailing: int  # trailing text rows per slot
    prefill_rows: int | None = None  # prompts per prefill pass, at most; None: the tuning'
    views: tuple[int, ...] = ()  # KV view lengths to capture a decode graph for

    def __post_init__(self) -> None:
        # Shapes built by hand (bench, doctor) align like the planner's (views.KV_ALIGN).
        object.__setattr__(self, "kv_len", aligned_kv_len(self.kv_len))

    @classmethod
    def of(cls, group, slots: int | None = None) -> EngineShape:
        """A memory plan's group (qtts.core.engine.plan.planner.GroupPlan), with `slots` slots when
        fewer than planned run (an out-of-memory retry, the last rows of a group)."""
        return cls(
            slots=group.slots if slots is None else slots,
            kv_len=group.kv_len,
            max_frames=group.max_frames,
            max_trailing=group.max_trailing,
            prefill_rows=group.prefill_rows,
            views=group.views,
        )


def build_engine(
    model,
    config: ModelConfig,
    shape: EngineShape,
    *,
    tts_pad: torch.Tensor,
    talker: SamplingParams,
    subtalker: SamplingParams,
    dtype: torch.dtype,
    device,
    tuning: EngineTuning,
    gate: AbstractContextManager | None = None,
    on_capture_error: Callable[[GraphCaptureError], None] | None = None,
) -> tuple[Engine, GraphedDecodeStep | None]:
    """(engine, graphed step or None). The graphs are captured holding `gate` (no other thread's
    device work may run during a capture). A capture that fails for another reason than memory
    goes to `on_capture_error`, and the engine then decodes eagerly; without it, it raises."""
    if shape.prefill_rows is not None:
        tuning = replace(tuning, prefill_group=min(tuning.prefill_group, shape.prefill_rows))
    if capture_broken() is not None:  # an earlier failed capture: no graphs in this process
        tuning = replace(tuning, cuda_graphs=False)
    # With graphs, the KV cache is allocated under the gate too: while the vocoder thread
    # captures, the allocator skips the retry that frees a finished graph's pool, and the
    # allocation would fail for memory that is there.
    with (gate or nullcontext()) if tuning.cuda_graphs else nullcontext():
        state = SlotState(
            config,
            shape.slots,
            shape.kv_len,
            shape.max_frames,
            shape.max_trailing,
            talker=talker,
            subtalker=subtalker,
            dtype=dtype,
            device=device,
        )
        engine = Engine(model, config, state, tts_pad, tuning)
        if not tuning.cuda_graphs:
            return engine, None
        try:
            return engine, GraphedDecodeStep(engine, shape.views)
        except GraphCaptureError as e:
            if on_capture_error is None:
                raise
            on_capture_error(e)
    return engine, None
