"""The GPU decode step's layer stack: few, fat ops per layer, for a step that is launch-bound.

Inside a CUDA graph every kernel still costs a few microseconds, and a decode step runs 103 layer
passes (28 talker layers, 5 predictor layers x 15 passes): the module path's ~70 kernels per pass
put a floor of ~20 ms under every step, whatever the batch. This twin of `DecoderStack.forward`
(a few tokens per row, a static KV cache, no padding) issues 9 ops per layer pass:

    rms_norm -> qkv matmul -> qk_norm_rope_cache (norms, RoPE, K/V into the cache)
    -> decode_attention -> o_proj matmul + residual -> rms_norm -> gate/up matmul
    -> silu_mul -> down matmul + residual

q/k/v and gate/up are one matmul each, over the weights core/model/fused_weights.py fused once
at load (the modules' own parameters view slices of them, so no weight is held twice). RoPE
comes from cos/sin tables built once from the model's RotaryEmbedding. The custom ops (qtts.kernels,
qtts::decode_attention) run Triton kernels or SDPA on CUDA and their torch twins elsewhere, so
on CPU this is the same model up to float rounding (tests/unit/engine/test_fused_stack.py).
The residual adds ride in the matmuls (addmm) on a GPU; on CPU they stay separate adds, the
model's own rounding. Activations stay in the model dtype; logits go to fp32 for sampling.

`prefill` runs a padded group of prompts through the same weights and tables, also in 9 ops per
layer: the prefill form of the cache op writes each prompt's K/V straight into its slot's cache
rows and hands them to a grouped, causal attention under a key-padding bias built once per pass
(qtts.core.engine.step.prefill_attention); only each prompt's last position leaves the stack
(tests/unit/engine/test_fused_prefill.py ties it to the module path's padded prefill).
Knows tensors and the KV cache protocol; no sampling, no slots.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from qtts.core.engine.step.decode_attention import decode_attention, decode_attention_twin
from qtts.core.engine.step.prefill_attention import (
    prefill_attention,
    prefill_attention_twin,
    prefill_bias,
)
from qtts.core.model.fused_weights import fused_weight
from qtts.core.model.talker import DecoderStack
from qtts.kernels.rms_norm import rms_norm, rms_norm_twin
from qtts.kernels.rope_cache import (
    qk_norm_rope_cache,
    qk_norm_rope_cache_twin,
    qk_norm_rope_prefill,
    qk_norm_rope_prefill_twin,
)
from qtts.kernels.silu_mul import silu_mul, silu_mul_twin


@dataclass(frozen=True)
class LayerOps:
    rms_norm: Callable
    qk_norm_rope_cache: Callable
    qk_norm_rope_prefill: Callable
    decode_attention: Callable
    prefill_attention: Callable
    silu_mul: Callable


# The custom ops: each one kernel on CUDA, seen whole by torch.compile and the launch count.
CUSTOM_OPS = LayerOps(
    rms_norm=rms_norm,
    qk_norm_rope_cache=qk_norm_rope_cache,
    qk_norm_rope_prefill=qk_norm_rope_prefill,
    decode_attention=decode_attention,
    prefill_attention=prefill_attention,
    silu_mul=silu_mul,
)
# Their torch twins, called directly: what a CPU's custom ops run anyway, without the custom-op
# dispatch (tens of us a call, 500 calls a step; EngineTuning.custom_ops).
TWIN_OPS = LayerOps(
    rms_norm=rms_norm_twin,
    qk_norm_rope_cache=qk_norm_rope_cache_twin,
    qk_norm_rope_prefill=qk_norm_rope_prefill_twin,
    decode_attention=decode_attention_twin,
    prefill_attention=prefill_attention_twin,
    silu_mul=silu_mul_twin,
)


class FusedStack:
    def __init__(self, stack: DecoderStack, max_positions: int, ops: LayerOps = CUSTOM_OPS):
        first = stack.layers[0].self_attn
        self.heads, self.head_dim, self.scale = first.num_heads, first.head_dim, first.scale
        self.kv_heads = first.num_kv_heads
        self.eps = stack.norm.eps
        self.final_norm = stack.norm.weight
        self.ops = ops
        self.layers = [_FusedLayer(layer) for layer in stack.layers]
        # cos/sin [P, D/2] per position, exactly the model's (its forward over 0..P-1).
        weight = stack.norm.weight
        positions = torch.arange(max_positions, device=stack.rotary_emb.inv_freq.device)[None]
        cos, sin = stack.rotary_emb(positions, weight.dtype)  # [1, P, D]
        half = self.head_dim // 2
        self.cos = cos[0, :, :half].contiguous().to(weight.device)  # [P, D/2]
        self.sin = sin[0, :, :half].contiguous().to(weight.device)

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, positions: torch.Tensor, mask, cache) -> torch.Tensor:
        """x [B, T, H], positions [B, T] -> final-norm hidden [B, T, H]. `cache` gives the
        buffers to write and the span to attend (fused_targets); mask: bool [B, 1, 1, S] or
        None (attend to every key written so far)."""
        b, t, width = x.shape
        k_all, v_all, span = cache.fused_targets(t)  # [Ly, B, Hk, S_max, D] each, span <= S_max
        bias = None
        if mask is not None:  # once per step, not per layer: SDPA's additive form
            bias = torch.where(mask, 0.0, float("-inf")).to(x.dtype)  # [B, 1, 1, S]
        # [N, H], the residual stream: our own copy, since on a GPU the residual adds land in it
        h = x.reshape(b * t, width).clone()
        for w, k, v in zip(self.layers, k_all, v_all, strict=True):
            h = self._layer(w, h, positions=positions, k=k, v=v, span=span, bias=bias)
        return self.ops.rms_norm(h, self.final_norm, self.eps).reshape(b, t, width)

    def _layer(self, w: _FusedLayer, h, positions, k, v, span: int, bias) -> torch.Tensor:
        """One layer pass. Intermediates are dropped as soon as they are used: what a captured
        graph's pool must hold is one op's inputs and outputs, not the whole layer's."""
        b, t = positions.shape
        ops = self.ops
        qkv = F.linear(ops.rms_norm(h, w.input_norm, self.eps), w.qkv)  # [N, (Hq + 2 Hk) D]
        q = ops.qk_norm_rope_cache(
            qkv.view(b, t, -1),
            w.q_norm,
            w.k_norm,
            self.cos,
            self.sin,
            positions,
            k,
            v,
            self.heads,
            self.eps,
        )
        del qkv  # q: [B, Hq, T, D]
        out = ops.decode_attention(q, k[:, :, :span], v[:, :, :span], bias, self.scale)
        del q  # out: [B, T, Hq D]
        h = _plus_linear(h, out.reshape(b * t, -1), w.o)
        del out
        return self._mlp(w, h)

    @torch.no_grad()
    def prefill(self, x: torch.Tensor, lengths: torch.Tensor, cache) -> torch.Tensor:
        """x [m, L, H]: prompts right-padded to L, real up to `lengths` (int64 [m]), at
        positions 0..L-1; `cache` names the slot rows their K/V go to (fused_rows). -> the
        final-norm hidden state of each prompt's last real position [m, H]."""
        m, width, hidden = x.shape
        k_all, v_all, rows = cache.fused_rows(width)  # [Ly, slots, Hk, S_max, D]; int64 [m]
        positions = torch.arange(width, device=x.device).expand(m, width)  # [m, L]
        bias = prefill_bias(lengths, width, self.heads // self.kv_heads, x.dtype)  # once per pass
        h = x.reshape(m * width, hidden).clone()  # [N, H]: the residual stream, our own copy
        for w, k, v in zip(self.layers, k_all, v_all, strict=True):
            h = self.prefill_layer(w, h, positions=positions, rows=rows, k=k, v=v, bias=bias)
        last = torch.arange(m, device=x.device) * width + lengths - 1  # [m] rows of h
        return self.ops.rms_norm(h[last], self.final_norm, self.eps)  # [m, H]

    def prefill_layer(self, w: _FusedLayer, h, positions, rows, k, v, bias) -> torch.Tensor:
        """One layer pass over a padded group: as _layer, with K/V written at the cache rows
        `rows` and attended from the pass's own copy (no gather from the cache)."""
        m, t = positions.shape
        ops = self.ops
        qkv = F.linear(ops.rms_norm(h, w.input_norm, self.eps), w.qkv)  # [N, (Hq + 2 Hk) D]
        q, k_new, v_new = ops.qk_norm_rope_prefill(
            qkv.view(m, t, -1),
            w.q_norm,
            w.k_norm,
            self.cos,
            self.sin,
            positions,
            k,
            v,
            rows,
            self.heads,
            self.eps,
        )  # [m, Hq | Hk, L, D]
        del qkv
        out = ops.prefill_attention(q, k_new, v_new, bias, self.scale)  # [m, L, Hq D]
        del q, k_new, v_new
        h = _plus_linear(h, out.reshape(m * t, -1), w.o)
        del out
        return self._mlp(w, h)

    def _mlp(self, w: _FusedLayer, h: torch.Tensor) -> torch.Tensor:
        """A layer's second half: norm, gate/up matmul, silu_mul, down matmul + residual. The
        [N, 2I] gate/up product is dropped before the down matmul runs."""
        gate_up = F.linear(self.ops.rms_norm(h, w.post_norm, self.eps), w.gate_up)  # [N, 2I]
        act = self.ops.silu_mul(gate_up)  # [N, I]
        del gate_up
        return _plus_linear(h, act, w.down)


class _FusedLayer:
    def __init__(self, layer):
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = fused_weight(attn, "qkv_weight")  # [(Hq + 2 Hk) D, H]
        self.gate_up = fused_weight(mlp, "gate_up_weight")  # [2I, H]
        self.o, self.down = attn.o_proj.weight, mlp.down_proj.weight  # [out, in]
        self.input_norm = layer.input_layernorm.weight
        self.post_norm = layer.post_attention_layernorm.weight
        self.q_norm, self.k_norm = attn.q_norm.weight, attn.k_norm.weight


def _plus_linear(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """residual + x @ weight.T: on a GPU (and meta, which stands in for it) one in-place addmm_
    into the residual (an out-of-place addmm would first copy it: a second kernel); on CPU the
    model's own mm then add, so fp32 CPU results keep the module path's rounding."""
    if residual.device.type == "cpu":
        return residual + F.linear(x, weight)
    return residual.addmm_(x, weight.t())
