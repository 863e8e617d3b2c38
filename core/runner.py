"""The host loop: continuous batching over the engine's slots.

Fills free slots with waiting work (prefilled alone or in padded groups), replays decode steps, and
every `check_every` steps copies the finished flags to the host (the only host/device sync in the
loop), hands finished codes back and refills the freed slots. The host tracks an upper bound on
every slot's KV length without reading the device, so it can pick a length-bucketed attention view
per stretch. Knows slots and tensors; no text, no files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from qtts.core.engine import Engine, SlotFill
from qtts.core.prompt import Prompt
from qtts.core.sampling import RowParams


@dataclass
class EngineJob:
    key: Any  # the caller's handle, returned with the result
    prompt: Prompt | Callable[[], Prompt]  # built lazily when a slot frees up
    budget: int  # max_new_tokens
    seed: int
    talker: RowParams  # one row
    subtalker: RowParams  # one row


@dataclass
class EngineResult:
    key: Any
    codes: torch.Tensor  # int64 [frames, G], on the engine's device
    hit_budget: bool


def view_length(bound: int, bucket: int, max_len: int) -> int:
    """Smallest multiple of `bucket` >= bound, capped at the cache length."""
    return min(max_len, -(-bound // bucket) * bucket)


def run_continuous(
    engine: Engine,
    jobs: Iterable[EngineJob],
    *,
    check_every: int = 8,
    view_bucket: int = 256,
    step: Callable[[int], None] | None = None,
    prefill_group: int = 1,
) -> Iterator[list[EngineResult]]:
    """Yields the results finished at each check (completion order). prefill_group: prompts run
    together per prefill pass (1 = each alone, the official single-request numerics)."""
    state = engine.state
    step = step or engine.decode_step
    waiting = iter(jobs)
    occupant: list[EngineJob | None] = [None] * state.slots
    bound = [0] * state.slots  # host-side upper bound of each slot's KV length
    exhausted = False
    while True:
        fills = []
        for slot in range(state.slots):
            if occupant[slot] is None and not exhausted:
                job = next(waiting, None)
                if job is None:
                    exhausted = True
                    break
                prompt = job.prompt() if callable(job.prompt) else job.prompt
                fills.append(
                    SlotFill(slot, prompt, job.budget, job.seed, job.talker, job.subtalker)
                )
                occupant[slot], bound[slot] = job, prompt.embeds.shape[0]
        for start in range(0, len(fills), prefill_group):
            engine.prefill(fills[start : start + prefill_group])
        if all(o is None for o in occupant):
            return
        view = view_length(max(bound) + check_every + 1, view_bucket, state.kv.max_len)
        for _ in range(check_every):
            step(view)
        bound = [
            b + check_every if o is not None else 0 for b, o in zip(bound, occupant, strict=True)
        ]
        finished, frames, hit = _host_flags(state)
        done = []
        for slot, job in enumerate(occupant):
            if job is not None and finished[slot]:
                codes = state.codes[slot, : frames[slot]].clone()
                done.append(EngineResult(job.key, codes, hit[slot]))
                occupant[slot] = None
        if done:
            yield done


def _host_flags(state) -> tuple[list[bool], list[int], list[bool]]:
    """One small device->host copy of the per-slot flags (non-blocking, then one sync)."""
    packed = torch.stack((state.finished.long(), state.num_frames, state.hit_budget.long()))
    host = packed.to("cpu", non_blocking=True)
    if packed.is_cuda:
        torch.cuda.current_stream().synchronize()
    finished, frames, hit = host.tolist()
    return [bool(f) for f in finished], frames, [bool(h) for h in hit]
