"""Teacher forcing through the engine: every sampling site returns a given reference token instead
of its own choice, and the logits it saw are recorded. Two runs (say bf16 and fp32) then see the
same inputs at every step, so their logits and argmaxes can be compared site by site; comparing
free-running decodes instead would let one early divergence change everything after it.

Runs the engine eagerly (recording needs Python at every call; graph replay is tied to the eager
step by its own check)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from qtts.core.engine.loop import engine as engine_module
from qtts.core.engine.step.slots import SlotFill

Logits = dict[tuple[int, int, int], torch.Tensor]  # (row, frame, codebook) -> fp32 [V] on CPU


@contextmanager
def _sites_choose(choose) -> Iterator[None]:
    # The engine looks choose_tokens up at each call: swapped for this run, restored after.
    real = engine_module.choose_tokens
    engine_module.choose_tokens = choose
    try:
        yield
    finally:
        engine_module.choose_tokens = real


def forced_logits(eng, prompts, codes: list[torch.Tensor]) -> Logits:
    """Prefill slot i with prompts[i] and decode max(F_i) frames, forcing codes[i] ([F_i, G]
    int64, e.g. a free-running reference decode; zeros past its end) at every sampling site."""
    s = eng.state
    longest = max(int(c.shape[0]) for c in codes)
    forced = torch.zeros(s.slots, longest + 1, codes[0].shape[1], dtype=torch.long)  # [B, F+1, G]
    for i, c in enumerate(codes):
        forced[i, : c.shape[0]] = c
    forced = forced.to(s.c0.device)
    rows = torch.arange(s.slots, device=s.c0.device)
    seen: Logits = {}

    def choose(logits, frames, codebook, **_kwargs):
        # The engine passes choose_tokens' arguments by name. Every site passes the frame its
        # token belongs to: the talker the frame its c0 starts (prefill: 0), the predictor the
        # frame it completes.
        if logits.dtype != torch.float32:
            raise AssertionError(f"sampling site {codebook} got {logits.dtype} logits, not fp32")
        index = frames.clamp(0, longest)  # [n]
        for r in range(logits.shape[0]):
            seen.setdefault((r, int(index[r]), codebook), logits[r].float().cpu())
        return forced[rows[: logits.shape[0]], index, codebook]

    with _sites_choose(choose):
        eng.prefill(
            [SlotFill(slot=i, prompt=p, budget=longest + 1, seed=i) for i, p in enumerate(prompts)]
        )
        for _ in range(longest):
            eng.decode_step(s.kv.max_len)
    return seen


def agreement(a: Logits, b: Logits, codebooks: range, vocab: int) -> tuple[float, float, int]:
    """Over the (row, frame, codebook) sites both runs saw, codebook in `codebooks`, ids < vocab:
    (argmax agreement in [0, 1], worst max |a - b| / max |a| per site, number of sites)."""
    keys = sorted(k for k in a.keys() & b.keys() if k[2] in codebooks)
    same, worst = 0, 0.0
    for k in keys:
        x, y = a[k][:vocab], b[k][:vocab]
        same += int(x.argmax() == y.argmax())
        worst = max(worst, float((x - y).abs().max() / x.abs().max()))
    return same / len(keys), worst, len(keys)
