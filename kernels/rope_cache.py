"""The attention block's front in one kernel, as the torch op `qtts::qk_norm_rope_cache`: split
the fused q/k/v projection, RMSNorm each q and k head, rotate q and k by RoPE, return q and write
k and v into the static KV cache at each token's position.

Unfused that is about 30 kernels per layer (two RMSNorms, the RoPE arithmetic on q and k, the
rotate-half copies, two cache writes). RoPE comes from cos/sin tables computed once when the
engine is built (rows = positions, by the model's own RotaryEmbedding), gathered here by
position: nothing is recomputed per layer or per step. Rounding follows the twin, which is the
model's own order: norm in fp32 then cast and scale in the input dtype; q*cos and
rotate_half(q)*sin each rounded to that dtype, then their sum.

The op runs the Triton kernel on CUDA and the twin elsewhere; its fake implementation gives meta
calls their shape, so a meta-device count sees one op. The kernel trusts its positions (a check
per token would cost a host sync per step); with `checked_positions()` it flags any position
outside the RoPE table or the cache, the launcher restores the caches and raises. The job layer
and the synthesizer refuse rows that could get there; tests run the kernel checked. The cache
position of a token is its RoPE position (the talker writes at each slot's length, the
predictor at its frame-local position).

A padded prefill pass (`qtts::qk_norm_rope_prefill`) runs the same kernel with two changes: batch
row b writes the cache row `cache_rows[b]` (its slot, so the prompts land in their slots with no
gather or scatter of their own), and k and v also come back as [B, Hk, T, D] for the pass's
attention, stored by the same program that writes them into the cache.
tests/unit/kernels/test_layer_kernels.py ties kernel and twin under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import contextlib

import torch

from qtts.kernels.backend import TRITON_AVAILABLE, tl, triton
from qtts.kernels.rms_norm import rms_norm_twin
from qtts.kernels.rounding import rounded

_checked = False  # checked_positions(): flag out-of-range positions and raise (a host sync)


@contextlib.contextmanager
def checked_positions():
    """Within: the kernel refuses positions outside the RoPE table or the KV cache."""
    global _checked
    before, _checked = _checked, True
    try:
        yield
    finally:
        _checked = before


def qk_norm_rope_cache_twin(
    qkv: torch.Tensor,  # [B, T, (H + 2 Hk) D]: q heads, then k heads, then v heads
    q_weight: torch.Tensor,  # [D]
    k_weight: torch.Tensor,  # [D]
    cos: torch.Tensor,  # [P, D/2] in qkv's dtype: row p is position p
    sin: torch.Tensor,  # [P, D/2]
    positions: torch.Tensor,  # int64 [B, T]
    k_cache: torch.Tensor,  # [B, Hk, S, D], written at [b, :, positions[b, t]]
    v_cache: torch.Tensor,  # [B, Hk, S, D]
    heads: int,
    eps: float,
) -> torch.Tensor:
    q, _, _ = _twin(
        qkv=qkv,
        q_weight=q_weight,
        k_weight=k_weight,
        cos=cos,
        sin=sin,
        positions=positions,
        k_cache=k_cache,
        v_cache=v_cache,
        cache_rows=None,
        heads=heads,
        eps=eps,
    )
    return q.contiguous()


def qk_norm_rope_prefill_twin(
    qkv,
    q_weight,
    k_weight,
    cos,
    sin,
    positions,
    k_cache,
    v_cache,
    cache_rows,
    heads: int,
    eps: float,
):
    """As qk_norm_rope_cache_twin, batch row b writing cache row cache_rows[b] (int64 [B]; the
    caches are [slots, Hk, S, D]) -> q [B, H, T, D], k and v [B, Hk, T, D], contiguous."""
    q, k, v = _twin(
        qkv=qkv,
        q_weight=q_weight,
        k_weight=k_weight,
        cos=cos,
        sin=sin,
        positions=positions,
        k_cache=k_cache,
        v_cache=v_cache,
        cache_rows=cache_rows,
        heads=heads,
        eps=eps,
    )
    return q.contiguous(), k.contiguous(), v.contiguous()


def _twin(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, cache_rows, heads, eps):
    """-> q [B, H, T, D], k and v [B, Hk, T, D] (views, any layout); k/v also in the caches."""
    b, t, _ = qkv.shape
    kv_heads, d = k_cache.shape[1], k_cache.shape[3]
    q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    q = rms_norm_twin(q.reshape(b, t, heads, d), q_weight, eps).transpose(1, 2)  # [B, H, T, D]
    k = rms_norm_twin(k.reshape(b, t, kv_heads, d), k_weight, eps).transpose(1, 2)
    c = torch.cat((cos[positions], cos[positions]), dim=-1)[:, None]  # [B, 1, T, D]
    s = torch.cat((sin[positions], sin[positions]), dim=-1)[:, None]
    q = q * c + _rotate_half(q) * s
    k = k * c + _rotate_half(k) * s
    rows = torch.arange(b, device=qkv.device) if cache_rows is None else cache_rows
    v = v.reshape(b, t, kv_heads, d)  # [B, T, Hk, D]
    k_cache[rows[:, None], :, positions] = k.transpose(1, 2)  # [B, 1] against positions [B, T]
    v_cache[rows[:, None], :, positions] = v
    return q, k, v.transpose(1, 2)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


if TRITON_AVAILABLE:

    @triton.jit
    def _qk_norm_rope_cache_kernel(
        qkv_ptr,  # [B, T, (H + 2 Hk) D], unit stride along the last dim
        qkv_stride_b,
        qkv_stride_t,
        q_weight_ptr,  # [D]
        k_weight_ptr,  # [D]
        cos_ptr,  # [P, D/2] contiguous
        sin_ptr,
        pos_ptr,  # int64 [B, T]
        pos_stride_b,
        pos_stride_t,
        q_ptr,  # [B, H, T, D] contiguous (out)
        k_cache_ptr,  # [slots, Hk, S, D], unit stride along D (written)
        v_cache_ptr,  # same strides as k_cache
        cache_stride_b,
        cache_stride_h,
        cache_stride_s,
        rows_ptr,  # int64 [B]: the cache row of each batch row (HAS_ROWS; else row b)
        k_out_ptr,  # [B, Hk, T, D] contiguous (out, KV_OUT)
        v_out_ptr,  # [B, Hk, T, D] contiguous (out, KV_OUT)
        tokens,  # T
        heads,  # H
        kv_heads,  # Hk
        eps,
        bad_ptr,  # int32 [1]: set to 1 by a position out of range (CHECKED)
        positions_limit,  # min(RoPE table rows, cache length) (CHECKED)
        HALF: tl.constexpr,  # D / 2
        CHECKED: tl.constexpr,
        HAS_ROWS: tl.constexpr,
        KV_OUT: tl.constexpr,
    ):
        n = tl.program_id(0).to(tl.int64)  # b * T + t
        head = tl.program_id(1).to(tl.int64)  # q heads, then k heads, then v heads
        b, t = n // tokens, n % tokens
        row = b
        if HAS_ROWS:
            row = tl.load(rows_ptr + b).to(tl.int64)
        pos = tl.load(pos_ptr + b * pos_stride_b + t * pos_stride_t)
        if CHECKED:
            outside = (pos < 0) | (pos >= positions_limit)
            tl.store(bad_ptr, 1, mask=outside)
            pos = tl.where(outside, 0, pos)  # read in range; the launcher raises after
        i = tl.arange(0, HALF)
        src = qkv_ptr + b * qkv_stride_b + t * qkv_stride_t + head * 2 * HALF
        x1 = tl.load(src + i)
        x2 = tl.load(src + HALF + i)
        dt = x1.dtype
        if head < heads + kv_heads:  # q or k: RMSNorm, then RoPE
            if head < heads:
                w_ptr = q_weight_ptr
                dst = q_ptr + ((b * heads + head) * tokens + t) * 2 * HALF
            else:
                w_ptr = k_weight_ptr
                dst = k_cache_ptr + row * cache_stride_b + (head - heads) * cache_stride_h
                dst += pos * cache_stride_s
            f1, f2 = x1.to(tl.float32), x2.to(tl.float32)
            inv = tl.math.rsqrt(
                (tl.sum(f1 * f1, axis=0) + tl.sum(f2 * f2, axis=0)) / (2 * HALF) + eps
            )
            n1 = rounded(tl.load(w_ptr + i).to(tl.float32) * rounded(f1 * inv, dt), dt)
            n2 = rounded(tl.load(w_ptr + HALF + i).to(tl.float32) * rounded(f2 * inv, dt), dt)
            c = tl.load(cos_ptr + pos * HALF + i).to(tl.float32)
            s = tl.load(sin_ptr + pos * HALF + i).to(tl.float32)
            # rotate_half(x) = (-x2, x1): each product rounded, then the sum (the twin's order)
            o1 = rounded(n1 * c, dt) + rounded(-n2 * s, dt)
            o2 = rounded(n2 * c, dt) + rounded(n1 * s, dt)
            y1, y2 = rounded(o1, dt).to(dt), rounded(o2, dt).to(dt)
            tl.store(dst + i, y1)
            tl.store(dst + HALF + i, y2)
            if KV_OUT:
                if head >= heads:  # k: also to the pass's own [B, Hk, T, D]
                    out = k_out_ptr + ((b * kv_heads + head - heads) * tokens + t) * 2 * HALF
                    tl.store(out + i, y1)
                    tl.store(out + HALF + i, y2)
        else:  # v: straight into the cache
            kv_head = head - heads - kv_heads
            dst = v_cache_ptr + row * cache_stride_b + kv_head * cache_stride_h
            dst += pos * cache_stride_s
            tl.store(dst + i, x1)
            tl.store(dst + HALF + i, x2)
            if KV_OUT:
                out = v_out_ptr + ((b * kv_heads + kv_head) * tokens + t) * 2 * HALF
                tl.store(out + i, x1)
                tl.store(out + HALF + i, x2)


def qk_norm_rope_cache_triton(
    qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, heads: int, eps: float
) -> torch.Tensor:
    """The kernel's launcher (arguments as the twin's) -> q [B, H, T, D] contiguous."""
    q, _, _ = _launch(
        qkv=qkv,
        q_weight=q_weight,
        k_weight=k_weight,
        cos=cos,
        sin=sin,
        positions=positions,
        k_cache=k_cache,
        v_cache=v_cache,
        cache_rows=None,
        heads=heads,
        eps=eps,
    )
    return q


def qk_norm_rope_prefill_triton(
    qkv,
    q_weight,
    k_weight,
    cos,
    sin,
    positions,
    k_cache,
    v_cache,
    cache_rows,
    heads: int,
    eps: float,
):
    """The prefill form's launcher (arguments as its twin's) -> q, k, v, contiguous."""
    return _launch(
        qkv=qkv,
        q_weight=q_weight,
        k_weight=k_weight,
        cos=cos,
        sin=sin,
        positions=positions,
        k_cache=k_cache,
        v_cache=v_cache,
        cache_rows=cache_rows,
        heads=heads,
        eps=eps,
    )


def _launch(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, cache_rows, heads, eps):
    """One launch; with cache_rows, batch row b writes cache row cache_rows[b] and k/v come back
    too (else None)."""
    if not TRITON_AVAILABLE:
        raise RuntimeError("the qk_norm_rope_cache kernel needs triton; the op runs the twin")
    b, t, width = qkv.shape
    kv_heads, d = k_cache.shape[1], k_cache.shape[3]
    if width != (heads + 2 * kv_heads) * d or qkv.stride(-1) != 1 or d % 2:
        raise ValueError(f"qk_norm_rope_cache: qkv width {width} is not (H + 2 Hk) * D")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1:
        raise ValueError("qk_norm_rope_cache: k and v caches need equal strides, unit along D")
    if cos.shape[-1] != d // 2 or not cos.is_contiguous() or not sin.is_contiguous():
        raise ValueError("qk_norm_rope_cache: cos/sin must be contiguous [positions, D/2]")
    if len({qkv.dtype, k_cache.dtype, v_cache.dtype, q_weight.dtype, k_weight.dtype}) > 1:
        raise ValueError("qk_norm_rope_cache: qkv, caches and norm weights need one dtype")
    if (d // 2) & (d // 2 - 1) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError("qk_norm_rope_cache: head_dim / 2 must be a power of two, positions int")
    prefill = cache_rows is not None
    if prefill and (cache_rows.shape != (b,) or cache_rows.dtype != torch.int64):
        raise ValueError("qk_norm_rope_prefill: cache_rows must be int64 [B], one per batch row")
    q = torch.empty((b, heads, t, d), dtype=qkv.dtype, device=qkv.device)  # [B, H, T, D]
    k_out = v_out = None
    if prefill:
        k_out = torch.empty((b, kv_heads, t, d), dtype=qkv.dtype, device=qkv.device)  # [B,Hk,T,D]
        v_out = torch.empty_like(k_out)
    checked = _checked
    limit = min(cos.shape[0], k_cache.shape[2])
    bad = positions  # unchecked: never written (CHECKED compiles the store away), no allocation
    if checked and prefill and bool(((cache_rows < 0) | (cache_rows >= k_cache.shape[0])).any()):
        raise IndexError(f"qk_norm_rope_prefill: a cache row is outside 0..{k_cache.shape[0] - 1}")
    if checked:  # the cache must not be written where the position is wrong: copy, then restore
        bad = torch.zeros(1, dtype=torch.int32, device=qkv.device)  # [1]
        k_before, v_before = k_cache.clone(), v_cache.clone()
    if b * t:
        grid = (b * t, heads + 2 * kv_heads)
        _qk_norm_rope_cache_kernel[grid](
            qkv,
            qkv.stride(0),
            qkv.stride(1),
            q_weight,
            k_weight,
            cos,
            sin,
            positions,
            positions.stride(0),
            positions.stride(1),
            q,
            k_cache,
            v_cache,
            k_cache.stride(0),
            k_cache.stride(1),
            k_cache.stride(2),
            cache_rows if prefill else positions,
            k_out if prefill else q,
            v_out if prefill else q,
            t,
            heads,
            kv_heads,
            eps,
            bad,
            limit,
            HALF=d // 2,
            CHECKED=checked,
            HAS_ROWS=prefill,
            KV_OUT=prefill,
        )
    if checked and bad.item():
        k_cache.copy_(k_before)
        v_cache.copy_(v_before)
        raise IndexError(
            f"qk_norm_rope_cache: a position is outside 0..{limit - 1} (the RoPE "
            "table or the KV cache)"
        )
    return q, k_out, v_out


@torch.library.custom_op("qtts::qk_norm_rope_cache", mutates_args=("k_cache", "v_cache"))
def qk_norm_rope_cache(
    qkv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    heads: int,
    eps: float,
) -> torch.Tensor:
    """q/k norm, RoPE and the cache write as one op: the Triton kernel on CUDA, the twin
    elsewhere. Returns q [B, H, T, D]; k and v land in the caches."""
    return qk_norm_rope_cache_twin(
        qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, heads, eps
    )


@qk_norm_rope_cache.register_kernel("cuda")
def _(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, heads, eps):
    run = qk_norm_rope_cache_triton if TRITON_AVAILABLE else qk_norm_rope_cache_twin
    return run(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, heads, eps)


@qk_norm_rope_cache.register_fake
def _(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, heads, eps):
    b, t, _ = qkv.shape
    return qkv.new_empty((b, heads, t, k_cache.shape[3]))


@torch.library.custom_op("qtts::qk_norm_rope_prefill", mutates_args=("k_cache", "v_cache"))
def qk_norm_rope_prefill(
    qkv: torch.Tensor,  # [B, T, (H + 2 Hk) D]
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,  # int64 [B, T]
    k_cache: torch.Tensor,  # [slots, Hk, S, D]: one layer of the talker cache
    v_cache: torch.Tensor,
    cache_rows: torch.Tensor,  # int64 [B]: the slot each batch row writes
    heads: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The padded prefill form of qk_norm_rope_cache: k and v land in the rows cache_rows and
    come back for the pass's attention. Returns q [B, H, T, D], k and v [B, Hk, T, D]."""
    return qk_norm_rope_prefill_twin(
        qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, cache_rows, heads, eps
    )


@qk_norm_rope_prefill.register_kernel("cuda")
def _(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, cache_rows, heads, eps):
    run = qk_norm_rope_prefill_triton if TRITON_AVAILABLE else qk_norm_rope_prefill_twin
    return run(
        qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, cache_rows, heads, eps
    )


@qk_norm_rope_prefill.register_fake
def _(qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, cache_rows, heads, eps):
    b, t, _ = qkv.shape
    kv_heads, d = k_cache.shape[1], k_cache.shape[3]
    return (
        qkv.new_empty((b, heads, t, d)),
        qkv.new_empty((b, kv_heads, t, d)),
        qkv.new_empty((b, kv_heads, t, d)),
    )
