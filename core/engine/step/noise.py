"""The sampler's seeded noise: a pure function of (request seed, frame, codebook, vocab index).

Both sampler implementations draw with it (the torch twin here, the Triton kernel in
kernels/sampling.py, which computes the same integer hash in uint32), so a request's tokens do not
depend on its batch, slot, device or a resume. lowbias32 keys in int64 arithmetic that never
overflows; 23 random bits per uniform, never 0 or 1. Knows tensors only.
"""

from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF
# Bits per uniform: (n + 0.5) / 2^23 is exact in float32 for every n < 2^23 (24 significant
# bits), so u is never 0 or 1 and its Gumbel noise is finite. With 24 bits the top value's + 0.5
# rounded up to u == 1, noise +inf, and a filtered id's -inf + inf was NaN, which argmax picks:
# on the full-vocabulary draw, about once per 8,400 tokens at top-k 50 of 2,048 ids (one
# uniform in 2^24 per filtered id); a suppressed control id then reached the speech decoder.
UNIT_BITS = 23


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for uint32 values held in int64, without int64 overflow."""
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser (lowbias32); the Triton kernel computes the same in uint32."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, frames: torch.Tensor, codebook: int) -> torch.Tensor:
    """A 32-bit key per row from (seed, frame, codebook). seeds/frames int64 [B] -> int64 [B]."""
    k = mix32(frames * 32 + codebook)
    k = mix32(k ^ ((seeds >> 32) & _MASK32))
    return mix32(k ^ (seeds & _MASK32))


def uniform_noise(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """u in (0, 1) per (row, vocab index): float32 [B, V]."""
    v = torch.arange(vocab, dtype=torch.int64, device=keys.device)
    return noise_at(keys, v[None, :])


def noise_at(keys: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """uniform_noise's u at vocab ids `index` (int64 [B, n] or [1, n]): float32 [B, n]."""
    bits = mix32(keys[:, None] ^ mix32(index + 0x9E3779B9))
    return unit_from_bits(bits)


def unit_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """uint32 values (in int64) -> u in (0, 1), float32, exactly (see UNIT_BITS)."""
    top = bits >> (32 - UNIT_BITS)
    return (top.to(torch.float32) + 0.5) * (1.0 / (1 << UNIT_BITS))


def gumbel(u: torch.Tensor) -> torch.Tensor:
    return -torch.log(-torch.log(u))
