"""The slot scheduler: continuous batching over the engine's slots (the engine runs the model;
this decides which work goes into which free slot, and when).

Fills free slots with waiting work (prefilled alone or in padded groups), replays decode steps, and
every `check_every` steps copies the finished flags to the host (the only host/device sync in the
loop), hands finished codes back and refills the freed slots. While the device runs the steps just
queued, the host builds the next prompts ahead, so a refill only launches its prefill. The host
tracks an upper bound on every slot's KV length without reading the device, so it can pick a
length-bucketed attention view per stretch. A caller may follow a finished job with another (a
retry): the follow-up joins the queue behind the prompts already built, like any waiting job, so
no slot waits for it. Knows slots and tensors; no text, no files, no retry policy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from qtts.core.engine.loop.engine import Engine
from qtts.core.engine.step.slots import Prompt, SlotFill
from qtts.core.engine.step.views import view_length


@dataclass
class EngineJob:
    key: Any  # the caller's handle, returned with the result
    prompt: Prompt | Callable[[], Prompt]  # built when the loop looks ahead to it
    budget: int  # max_new_tokens
    seed: int


@dataclass
class EngineResult:
    key: Any
    codes: torch.Tensor  # int64 [frames, G], on the engine's device
    hit_budget: bool


def run_continuous(
    engine: Engine,
    jobs: Iterable[EngineJob],
    *,
    step: Callable[[int], None] | None = None,
    again: Callable[[EngineJob, EngineResult], EngineJob | None] | None = None,
) -> Iterator[list[EngineResult]]:
    """Yields the results finished at each check (completion order). `step(view_len)` runs one
    decode step (default: the engine's eager step; a GraphedDecodeStep replays graphs).
    `again(job, result)`: the job to run after a finished one instead of yielding its result
    (queued ahead of the jobs not yet read), or None to yield it."""
    state, tuning = engine.state, engine.tuning
    step = step or engine.decode_step
    waiting = iter(jobs)
    follow_ups: deque[EngineJob] = deque()  # from `again`: read before `waiting`
    ready: deque[tuple[EngineJob, Prompt]] = deque()  # prompts built ahead, in job order
    lookahead = min(state.slots, tuning.prefill_group)

    def prepare(n: int) -> None:
        while len(ready) < n:
            job = follow_ups.popleft() if follow_ups else next(waiting, None)
            if job is None:
                return
            ready.append((job, job.prompt() if callable(job.prompt) else job.prompt))

    occupant: list[EngineJob | None] = [None] * state.slots
    bound = [0] * state.slots  # host-side upper bound of each slot's KV length
    while True:
        free = [slot for slot, job in enumerate(occupant) if job is None]
        prepare(len(free))
        fills = []
        for slot in free[: len(ready)]:
            job, prompt = ready.popleft()
            fills.append(SlotFill(slot=slot, prompt=prompt, budget=job.budget, seed=job.seed))
            occupant[slot], bound[slot] = job, prompt.embeds.shape[0]
        group = tuning.prefill_group
        for start in range(0, len(fills), group):
            engine.prefill(fills[start : start + group])
        if all(job is None for job in occupant):
            return
        check = tuning.check_every
        view = view_length(max(bound) + check + 1, tuning.view_bucket, state.kv.max_len)
        for _ in range(check):
            step(view)
        prepare(lookahead)  # host work that overlaps the steps just queued
        bound = [b + check if j is not None else 0 for b, j in zip(bound, occupant, strict=True)]
        finished, frames, hit = _host_flags(state)
        done = []
        for slot, job in enumerate(occupant):
            if job is not None and finished[slot]:
                codes = state.codes[slot, : frames[slot]].clone()
                result = EngineResult(job.key, codes, hit[slot])
                follow_up = None if again is None else again(job, result)
                if follow_up is None:
                    done.append(result)
                else:
                    follow_ups.append(follow_up)
                occupant[slot] = None
        if done:
            yield done


def _host_flags(state) -> tuple[list[bool], list[int], list[bool]]:
    """One small device->host copy of the per-slot flags (non-blocking, then one sync)."""
    packed = torch.stack((state.finished.long(), state.num_frames, state.hit_budget.long()))
    host = packed.to("cpu", non_blocking=True)
    if packed.is_cuda:
        torch.cuda.current_stream(packed.device).synchronize()
    finished, frames, hit = host.tolist()
    return [bool(f) for f in finished], frames, [bool(h) for h in hit]
