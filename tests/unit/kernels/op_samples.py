"""CPU sample inputs for every qtts custom op, in the layouts the engine passes them: the real
head counts and head_dim with few rows, KV caches as one layer's slice of the stacked cache, decode
views cut along the positions, predictor positions expanded with stride 0 along the batch.

SAMPLES[op](dtype, grad) -> argument tuples; `grad` marks the float inputs the op only reads as
requiring grad (mutated ones never: autograd refuses in-place writes to such leaves).
"""

from __future__ import annotations

import torch

HEADS, KV_HEADS, HEAD_DIM = 16, 8, 128  # both published sizes
HIDDEN = 256
SLOTS, POSITIONS = 2, 16
VOCAB = 64


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _rand(*shape, dtype, grad=False, g) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_(grad)


def rms_norm(dtype, grad):
    g = _gen()
    w = _rand(HIDDEN, dtype=dtype, grad=grad, g=g)
    return [
        (_rand(SLOTS, 3, HIDDEN, dtype=dtype, grad=grad, g=g), w, 1e-6),
        (_rand(SLOTS, 6, HIDDEN, dtype=dtype, grad=grad, g=g)[:, ::2], w, 1e-6),  # strided rows
        (_rand(3, SLOTS, HIDDEN, dtype=dtype, grad=grad, g=g).transpose(0, 1), w, 1e-6),
    ]  # the permuted last case: the output is contiguous all the same, as the kernel's


def silu_mul(dtype, grad):
    g = _gen()
    return [
        (_rand(SLOTS, 3, 2 * 3 * HIDDEN, dtype=dtype, grad=grad, g=g),),
        (_rand(3, SLOTS, 2 * 3 * HIDDEN, dtype=dtype, grad=grad, g=g).transpose(0, 1),),
    ]


def snake_beta(dtype, grad):
    """The speech decoder's activation: contiguous, a trimmed transposed conv's output (row stride
    past T), a permuted input (the kernel copies it) and the output padded for a causal conv."""
    g = _gen()
    c = 96  # the decoder's last width
    la, lb = (_rand(c, dtype=dtype, grad=grad, g=g) for _ in "ab")  # [C] log scales
    return [
        (_rand(SLOTS, c, 40, dtype=dtype, grad=grad, g=g), la, lb, 1e-9),
        (_rand(SLOTS, c, 45, dtype=dtype, grad=grad, g=g)[..., :40], la, lb, 1e-9),
        (_rand(SLOTS, 40, c, dtype=dtype, grad=grad, g=g).transpose(1, 2), la, lb, 1e-9),
        (_rand(SLOTS, c, 40, dtype=dtype, grad=grad, g=g), la, lb, 1e-9, 6),  # a conv's padding
    ]


def qk_norm_rope_cache(dtype, grad):
    g = _gen()
    cases = []
    for tokens in (1, 2):  # the talker's decode step; the predictor's first pass
        qkv = _rand(SLOTS, tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, dtype=dtype, grad=grad, g=g)
        q_w, k_w = (_rand(HEAD_DIM, dtype=dtype, grad=grad, g=g) for _ in range(2))
        cos, sin = (_rand(POSITIONS, HEAD_DIM // 2, dtype=dtype, grad=grad, g=g) for _ in "cs")
        if tokens == 1:
            pos = torch.tensor([[3], [POSITIONS - 1]])  # [B, 1]: each slot's length
        else:
            pos = torch.arange(tokens).expand(SLOTS, tokens)  # [B, T], stride 0 along B
        stacked = _rand(2, 2, SLOTS, KV_HEADS, POSITIONS, HEAD_DIM, dtype=dtype, g=g)
        cases.append((qkv, q_w, k_w, cos, sin, pos, stacked[0, 1], stacked[1, 1], HEADS, 1e-6))
    return cases


def qk_norm_rope_prefill(dtype, grad):
    """A padded group of 2 prompts into slots 3 and 1 of a 4-slot cache layer, positions 0..4
    expanded with stride 0 along the batch."""
    g = _gen()
    tokens, slots = 5, 4
    qkv = _rand(SLOTS, tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, dtype=dtype, grad=grad, g=g)
    q_w, k_w = (_rand(HEAD_DIM, dtype=dtype, grad=grad, g=g) for _ in range(2))
    cos, sin = (_rand(POSITIONS, HEAD_DIM // 2, dtype=dtype, grad=grad, g=g) for _ in "cs")
    pos = torch.arange(tokens).expand(SLOTS, tokens)  # [B, T]
    stacked = _rand(2, 2, slots, KV_HEADS, POSITIONS, HEAD_DIM, dtype=dtype, g=g)
    rows = torch.tensor([3, 1])  # [B]: each prompt's slot
    return [(qkv, q_w, k_w, cos, sin, pos, stacked[0, 1], stacked[1, 1], rows, HEADS, 1e-6)]


def prefill_attention(dtype, grad):
    """Two prompts of 5 and 3 positions padded to 5, under their bias (prefill_bias)."""
    from qtts.core.engine.step.prefill_attention import prefill_bias

    g = _gen()
    tokens = 5
    q = _rand(SLOTS, HEADS, tokens, HEAD_DIM, dtype=dtype, grad=grad, g=g)
    k, v = (_rand(SLOTS, KV_HEADS, tokens, HEAD_DIM, dtype=dtype, grad=grad, g=g) for _ in "kv")
    bias = prefill_bias(torch.tensor([5, 3]), tokens, HEADS // KV_HEADS, dtype)
    return [(q, k, v, bias, HEAD_DIM**-0.5)]


def decode_attention(dtype, grad):
    g = _gen()
    view = POSITIONS // 2  # the decode view: the first `view` positions of each slot's cache
    q = _rand(SLOTS, HEADS, 1, HEAD_DIM, dtype=dtype, grad=grad, g=g)
    k, v = (_rand(SLOTS, KV_HEADS, POSITIONS, HEAD_DIM, dtype=dtype, grad=grad, g=g)[:, :, :view]
            for _ in "kv")  # fmt: skip
    bias = torch.zeros(SLOTS, 1, 1, view, dtype=dtype)
    bias[0, ..., 3:] = float("-inf")  # slot 0 holds 3 positions
    first = [_rand(SLOTS, h, 2, HEAD_DIM, dtype=dtype, grad=grad, g=g) for h in (16, 8, 8)]
    scale = HEAD_DIM**-0.5
    return [(q, k, v, bias, scale), (q, k, v, None, scale), (*first, None, scale)]


def sample_tokens(dtype, grad):
    """Runs the kernel on CPU only with TRITON_INTERPRET=1 (no twin behind the op)."""
    g = _gen()
    b = 3
    logits = _rand(b, VOCAB, dtype=dtype, grad=grad, g=g)
    greedy, temperature = torch.tensor([True, False, False]), torch.tensor([1.0, 0.8, 1.2])
    top_k, top_p, repetition_penalty = (
        torch.tensor([0, 5, 0]),
        torch.tensor([1.0, 1.0, 0.9]),
        torch.tensor([1.1, 1.0, 1.3]),
    )
    rows = (greedy, temperature, top_k, top_p, repetition_penalty)
    seen = torch.rand(b, VOCAB, generator=g) < 0.2
    site = (seen, torch.tensor([True, False, True]), VOCAB - 1, torch.arange(VOCAB) >= VOCAB - 3)
    tail = (torch.tensor([1, 2, 3]), torch.tensor([0, 4, 7]), 0)  # seeds, frames, codebook
    out = torch.zeros(b, dtype=torch.int64)
    return [
        (logits, out, *rows, *site, *tail),  # the talker's site
        (logits, out.clone(), *rows, None, None, -1, None, *tail),  # the predictor's
    ]


SAMPLES = {
    "qtts::rms_norm": rms_norm,
    "qtts::silu_mul": silu_mul,
    "qtts::snake_beta": snake_beta,
    "qtts::qk_norm_rope_cache": qk_norm_rope_cache,
    "qtts::qk_norm_rope_prefill": qk_norm_rope_prefill,
    "qtts::decode_attention": decode_attention,
    "qtts::prefill_attention": prefill_attention,
    "qtts::sample_tokens": sample_tokens,
}
