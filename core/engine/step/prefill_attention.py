"""Attention for a padded prefill pass through the fused ops: causal, over each prompt's real keys.

A pass holds m right-padded prompts of up to L positions. Their keys come fresh from the pass
(qtts::qk_norm_rope_prefill), not from a cache view, so there is one [L, L] pattern per prompt:
causal, and blind to the padding keys. It is built once per pass as an additive bias in the
model dtype, and every layer reads it.

The attention is grouped, as in the decode step (qtts.core.engine.step.decode_attention): the n_rep
query heads that share a KV head become n_rep blocks of that head's query rows, so SDPA reads
K/V as they are, with no repeat and no enable_gqa (which not every CUDA kernel takes with a
bias). The bias therefore holds one block of rows per shared query head. Its rows are padded to
BIAS_ALIGN keys: CUDA's memory-efficient SDPA copies a bias whose strides are not aligned, on
every call, that is once per layer. Padded query rows still see key 0, so no row is all -inf and
no NaN appears; what they compute is never read.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BIAS_ALIGN = 16  # keys per bias row in memory: aligned strides for CUDA's SDPA kernels


def prefill_bias(lengths: torch.Tensor, width: int, n_rep: int, dtype: torch.dtype):
    """Additive [m, 1, n_rep * L, L] for prompts of `lengths` (int64 [m]) padded to `width`:
    row r * L + t (query position t of the r-th head sharing a KV head) sees keys s <= t that are
    real (s < length). Built in a few launches, once per pass."""
    m, keys = lengths.shape[0], torch.arange(width, device=lengths.device)  # [L]
    seen = (keys[None, :] <= keys[:, None]) & (keys < lengths[:, None, None])  # [m, L, L]
    stride = -(-width // BIAS_ALIGN) * BIAS_ALIGN
    bias = torch.full(
        (m, 1, n_rep, width, stride), float("-inf"), dtype=dtype, device=lengths.device
    )
    bias[..., :width].masked_fill_(seen[:, None, None], 0.0)  # [m, 1, n_rep, L, L] in place
    return bias.view(m, 1, n_rep * width, stride)[..., :width]


@torch.library.custom_op("qtts::prefill_attention", mutates_args=())
def prefill_attention(
    q: torch.Tensor,  # [B, H, T, D]
    k: torch.Tensor,  # [B, Hk, S, D]
    v: torch.Tensor,  # [B, Hk, S, D]
    bias: torch.Tensor,  # additive [B, 1, (H / Hk) T, S] (prefill_bias)
    scale: float,
) -> torch.Tensor:
    """Grouped attention under `bias` -> [B, T, H * D], the layout o_proj reads. One op so that a
    meta-device launch count sees what CUDA runs: one SDPA kernel and one copy back to head
    order (qtts.core.bench.launches). Its body is prefill_attention_twin, on every device."""
    return prefill_attention_twin(q, k, v, bias, scale)


def prefill_attention_twin(q, k, v, bias, scale: float) -> torch.Tensor:
    """prefill_attention's computation."""
    b, h, t, d = q.shape
    kv_heads = k.shape[1]
    n_rep = h // kv_heads
    if bias.shape[-2:] != (n_rep * t, k.shape[2]):
        raise ValueError(
            f"prefill_attention: bias {tuple(bias.shape)} is not [B, 1, "
            f"{n_rep * t}, {k.shape[2]}] (prefill_bias)"
        )
    grouped = q.reshape(b, kv_heads, n_rep * t, d)  # head j*n_rep + r, position t -> row r*T + t
    out = F.scaled_dot_product_attention(grouped, k, v, attn_mask=bias, scale=scale)
    # [B, Hk, n_rep, T, D] -> [B, T, Hk, n_rep, D]: reshape, never view (CUDA's layout differs)
    return out.unflatten(2, (n_rep, t)).permute(0, 3, 1, 2, 4).reshape(b, t, h * d)


@prefill_attention.register_fake
def _(q, k, v, bias, scale):
    b, h, t, d = q.shape
    return q.new_empty((b, t, h * d))
