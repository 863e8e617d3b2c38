"""The one engine driver: an engine built for a memory plan's group, requests run through it, and
the groups it finishes handed to the vocoder beside it.

The synthesizer's passes, `qtts bench`, `qtts doctor`'s decodes and the launch counter all build
and run engines here, so a change to how a pass runs (graph captures under the device gate, the
capture-error policy, counted steps, the vocoder's overlap and drain) is made once, and the bench
measures what a job runs. Knows engines, streams, the gate and the clock; no text, no files, no
retry policy (a caller's `again` decides a follow-up).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, replace

import torch

from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.loop.engine import Engine
from qtts.core.engine.loop.graphs import GraphCaptureError, GraphedDecodeStep, capture_broken
from qtts.core.engine.loop.scheduler import EngineRequest, EngineResult, run_continuous
from qtts.core.engine.step.slots import SlotState
from qtts.core.engine.step.views import aligned_kv_len
from qtts.core.model.config import ModelConfig, SamplingParams
from qtts.core.synthesis import decode_overlap
from qtts.core.synthesis.device_gate import DeviceGate
from qtts.core.synthesis.prompt import pad_embedding
from qtts.core.synthesis.synthesis_clock import SynthesisClock

log = logging.getLogger("qtts")
Again = Callable[[EngineRequest, EngineResult], EngineRequest | None]


@dataclass(frozen=True)
class EngineShape:
    slots: int
    kv_len: int  # KV positions per slot
    max_frames: int
    max_trailing: int  # trailing text rows per slot
    prefill_rows: int | None = None  # prompts per prefill pass, at most; None: the tuning's
    views: tuple[int, ...] = ()  # KV view lengths to capture a decode graph for

    def __post_init__(self) -> None:
        # Shapes built by hand (the launch counter) align like the planner's (views.KV_ALIGN).
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


@dataclass
class EnginePass:
    engine: Engine
    step: GraphedDecodeStep | None  # None: the engine's own eager step
    clock: SynthesisClock

    def run(
        self, requests: Iterable[EngineRequest], again: Again | None = None
    ) -> Iterator[list[EngineResult]]:
        """The slot scheduler over `requests` (core/engine/loop/scheduler.py), each decode step
        and each finished request's frames (kept or not: the engine made them) counted.
        again(request, result): a follow-up to run instead of yielding the result, or None."""
        engine, clock = self.engine, self.clock
        counted = clock.counting_step(self.step or engine.decode_step, engine.state.slots)

        def finished(request: EngineRequest, result: EngineResult) -> EngineRequest | None:
            clock.frames += int(result.codes.shape[0])
            return None if again is None else again(request, result)

        return run_continuous(engine, requests, step=counted, again=finished)


class EngineDriver:
    """One model's engine passes on one device, and the vocoder's overlap beside them."""

    def __init__(
        self, model, config: ModelConfig, device, tuning: EngineTuning, *, tolerate_capture=False
    ):
        self.model, self.config, self.tuning = model, config, tuning
        self.device = torch.device(device)
        # A capture failing for another reason than memory: a warning and an eager pass (a job:
        # speed, never the job), or the error (a bench or a doctor's check names it).
        self.tolerate_capture = tolerate_capture
        self.tts_pad = pad_embedding(model.talker, config)
        # Held by graph capture, a pass's build and empty_cache (decode side, first) and by the
        # vocoder thread per micro-batch: no other thread's device work runs during a capture.
        self.gate = DeviceGate()
        self.clock = SynthesisClock()  # where the time went (host counts only)
        # Made once for the driver's life: graphs captured on a stream outlive one pass. None:
        # the caller's stream (a CPU; QTTS_DECODE_PRIORITY=0 for the decode loop).
        cuda = self.device.type == "cuda"
        sms = tuning.vocoder_sms
        self.vocoder_stream = decode_overlap.vocoder_stream(self.device, sms) if cuda else None
        priority = cuda and tuning.decode_priority
        self.decode_stream = decode_overlap.decode_stream(self.device) if priority else None

    def build(
        self,
        shape: EngineShape,
        *,
        talker: SamplingParams,
        subtalker: SamplingParams,
        fixed_length: bool = False,
    ) -> EnginePass:
        """An engine of `shape`, every decode graph it can need captured now under the device
        gate, before its first prefill; out of memory raises (the caller's halving retry).
        fixed_length: EOS never wins (a bench's rows, a doctor's comparison)."""
        start, tuning = time.perf_counter(), self.tuning
        if shape.prefill_rows is not None:
            tuning = replace(tuning, prefill_group=min(tuning.prefill_group, shape.prefill_rows))
        if capture_broken() is not None:  # an earlier failed capture: no graphs in this process
            tuning = replace(tuning, cuda_graphs=False)
        # With graphs, the KV cache is allocated under the gate too: while the vocoder thread
        # captures, the allocator skips the retry that frees a finished graph's pool, and the
        # allocation would fail for memory that is there.
        with self.gate if tuning.cuda_graphs else nullcontext():
            state = SlotState(
                self.config,
                shape.slots,
                shape.kv_len,
                shape.max_frames,
                shape.max_trailing,
                talker=talker,
                subtalker=subtalker,
                dtype=self.model.talker.codec_head.weight.dtype,
                device=self.device,
            )
            engine, step = Engine(self.model, self.config, state, self.tts_pad, tuning), None
            try:
                step = GraphedDecodeStep(engine, shape.views) if tuning.cuda_graphs else None
            except GraphCaptureError as e:
                if not self.tolerate_capture:
                    raise
                log.warning("%s; decoding this pass without CUDA graphs", e)
        if fixed_length:
            engine.suppress[engine.eos] = True
        self.clock.passes += 1
        self.clock.pass_build_s += time.perf_counter() - start
        return EnginePass(engine, step, self.clock)

    def overlapped(self, finished: Iterable, work: Callable) -> Iterator:
        """work(group) for each finished group, in order: the groups made on the decode stream,
        the work on the vocoder's thread and stream (GPU) or after each group on the decode
        thread (a CPU's serial budget: core/engine/device/cpu_runtime.py); waits counted."""
        return decode_overlap.overlapped(
            decode_overlap.prioritized(finished, self.decode_stream),
            work,
            self.device,
            gate=self.gate,
            stream=self.vocoder_stream,
            inline=not self.tuning.vocoder_thread,
            clock=self.clock,
        )
