"""Attention for the engine's one-token decode step: grouped query rows instead of repeated K/V.

The model's default masked attention repeats each KV head's keys for its n_rep query heads, which
on a static cache view copies [B, H, S, D] per layer per step. Here the n_rep query heads that
share a KV head become that head's n_rep query rows (same keys, same per-slot mask), so SDPA reads
the cache view in place. Same result as the repeat path up to float rounding
(tests/unit/engine/test_decode_attention.py ties the two); the engine uses it on GPU.

Independent of SDPA's output layout: CUDA's flash and memory-efficient kernels return
[B, H, T, D] laid out as [B, T, H, D], so results are reshaped, never viewed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attend_grouped(
    q: torch.Tensor,  # [B, H, 1, D]
    k: torch.Tensor,  # [B, Hk, S, D]
    v: torch.Tensor,  # [B, Hk, S, D]
    mask: torch.Tensor | None,  # bool [B, 1, 1, S] (True = attend), additive float, or None
    scale: float,
    n_rep: int,  # H // Hk
) -> torch.Tensor:
    b, h, t, d = q.shape
    if t != 1:
        raise ValueError(f"grouped decode attention takes one query per row, got {t}")
    grouped = q.reshape(b, h // n_rep, n_rep, d)  # head j*n_rep + r -> KV head j, row r
    out = F.scaled_dot_product_attention(grouped, k, v, attn_mask=mask, scale=scale)
    return out.reshape(b, h, 1, d)  # [B, H, 1, D]; copies only if SDPA's layout needs it


@torch.library.custom_op("qtts::decode_attention", mutates_args=())
def decode_attention(
    q: torch.Tensor,  # [B, H, T, D]
    k: torch.Tensor,  # [B, Hk, S, D]
    v: torch.Tensor,  # [B, Hk, S, D]
    bias: torch.Tensor | None,  # additive float [B, 1, 1, S] (0 = attend, -inf = not), T == 1
    scale: float,
) -> torch.Tensor:
    """The fused stack's attention as one op -> [B, T, H * D], the layout o_proj reads. One op so
    that a meta-device launch count sees what CUDA runs: one SDPA kernel and at most one layout
    copy. Its body is decode_attention_twin, on every device."""
    return decode_attention_twin(q, k, v, bias, scale)


def decode_attention_twin(q, k, v, bias, scale: float) -> torch.Tensor:
    """decode_attention's computation. One query per row: grouped (attend_grouped), under the
    bias if given. Several (the predictor's first pass, keys at positions 0..T-1 only): causal,
    native GQA."""
    b, h, t, d = q.shape
    if t == 1:
        out = attend_grouped(q, k, v, bias, scale=scale, n_rep=h // k.shape[1])  # [B, H, 1, D]
        return out.reshape(b, 1, h * d)
    if bias is not None or k.shape[2] != t:
        raise ValueError("decode_attention: several queries attend causally from position 0")
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    return out.transpose(1, 2).reshape(b, t, h * d)


@decode_attention.register_fake
def _(q, k, v, bias, scale):
    b, h, t, d = q.shape
    return q.new_empty((b, t, h * d))
