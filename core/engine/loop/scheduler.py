"""The slot scheduler: continuous batching over the engine's slots (the engine runs the model;
this decides which work goes into which free slot, and when).

Fills free slots with waiting work (prefilled alone or in padded groups), replays decode steps, and
every `check_every` steps copies the finished flags to the host (the only host/device sync in the
loop), hands finished codes back and refills the freed slots. While the device runs the steps just
queued, the host builds the next prompts ahead, so a refill only launches its prefill. The host
tracks an upper bound on every slot's KV length without reading the device, so it can pick a
length-bucketed attention view per stretch. A caller may follow a finished request with another
(a retry): the follow-up joins the queue behind the prompts already built, like any waiting
request, so no slot waits for it. Knows slots and tensors; no text, no files, no retry policy.
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
class EngineRequest:
    """One prompt to decode in a slot (a row's or segment's attempt, a bench's synthetic row)."""

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
    requests: Iterable[EngineRequest],
    *,
    step: Callable[[int], None] | None = None,
    again: Callable[[EngineRequest, EngineResult], EngineRequest | None] | None = None,
) -> Iterator[list[EngineResult]]:
    """Yields the results finished at each check (completion order). `step(view_len)` runs one
    decode step (default: the engine's eager step; a GraphedDecodeStep replays graphs).
    `again(request, result)`: the request to run after a finished one instead of yielding its
    result (queued ahead of the requests not yet read), or None to yield it."""
    state, tuning = engine.state, engine.tuning
    step = step or engine.decode_step
    waiting = iter(requests)
    follow_ups: deque[EngineRequest] = deque()  # from `again`: read before `waiting`
    ready: deque[tuple[EngineRequest, Prompt]] = deque()  # prompts built ahead, in request order
    lookahead = min(state.slots, tuning.prefill_group)

    def prepare(n: int) -> None:
        while len(ready) < n:
            request = follow_ups.popleft() if follow_ups else next(waiting, None)
            if request is None:
                return
            ready.append(
                (request, request.prompt() if callable(request.prompt) else request.prompt)
            )

    occupant: list[EngineRequest | None] = [None] * state.slots
    bound = [0] * state.slots  # host-side upper bound of each slot's KV length
    while True:
        free = [slot for slot, request in enumerate(occupant) if request is None]
        prepare(len(free))
        fills = []
        for slot in free[: len(ready)]:
            request, prompt = ready.popleft()
            fills.append(
                SlotFill(slot=slot, prompt=prompt, budget=request.budget, seed=request.seed)
            )
            occupant[slot], bound[slot] = request, prompt.embeds.shape[0]
        group = tuning.prefill_group
        for start in range(0, len(fills), group):
            engine.prefill(fills[start : start + group])
        if all(request is None for request in occupant):
            return
        check = tuning.check_every
        view = view_length(max(bound) + check + 1, tuning.view_bucket, state.kv.max_len)
        for _ in range(check):
            step(view)
        prepare(lookahead)  # host work that overlaps the steps just queued
        bound = [b + check if j is not None else 0 for b, j in zip(bound, occupant, strict=True)]
        finished, frames, hit = _host_flags(state)
        done = []
        for slot, request in enumerate(occupant):
            if request is not None and finished[slot]:
                codes = state.codes[slot, : frames[slot]].clone()
                result = EngineResult(request.key, codes, hit[slot])
                follow_up = None if again is None else again(request, result)
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
