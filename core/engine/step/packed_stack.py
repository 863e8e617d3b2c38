"""The code predictor's one-token step with packed weights: the CPU fast path of its forward.

On a CPU a decode step is a long chain of small ops (75 predictor layer passes per frame), where
per-op dispatch and awkward matmul layouts cost more than the arithmetic. This twin of
`DecoderStack.forward` for one new token per row, no padding mask, packs each layer's weights once:
q/k/v and gate/up fused into one matmul each, every weight pre-transposed to [in, out] (a much
faster layout for a few rows), RMSNorm as one fused call, RoPE as a roll, attention over the cached
keys as two small matmuls. It reads the same KV cache (the KVCache protocol) and returns the same
hidden states as the module path up to float rounding; tests/unit/engine/test_packed_stack.py
ties the two together. The packed copy doubles only the predictor's weights (5 layers). Knows
tensors only; the GPU runs the fused stack (core/engine/step/fused_stack.py) instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from qtts.core.model.talker import DecoderStack, KVCache


class PackedStack:
    def __init__(self, stack: DecoderStack):
        first = stack.layers[0].self_attn
        self.heads, self.kv_heads = first.num_heads, first.num_kv_heads
        self.head_dim = first.head_dim
        self.scale = first.scale
        self.rotary = stack.rotary_emb
        self.final_norm = _norm(stack.norm)
        self.layers = [_PackedLayer(layer) for layer in stack.layers]

    @torch.no_grad()
    def __call__(
        self, x: torch.Tensor, positions: torch.Tensor, mask: None, cache: KVCache
    ) -> torch.Tensor:
        """x [B, 1, H], positions [B, 1] -> final-norm hidden [B, 1, H]. Every row attends to all
        the keys the cache returns (mask is None, as for the code predictor)."""
        if mask is not None:
            raise ValueError("the packed step attends without a padding mask")
        b, d, half = x.shape[0], self.head_dim, self.head_dim // 2
        cos, sin = self.rotary(positions, x.dtype)  # [B, 1, D]
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, 1, D] against [B, heads, 1, D]
        # rotate_half(t) * sin == roll(t, half) * (sin with its first half negated), bit for bit
        sin_signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        q_width, kv_width = self.heads * d, self.kv_heads * d
        rep = self.heads // self.kv_heads
        for index, w in enumerate(self.layers):
            qkv = w.input_norm(x) @ w.qkv  # [B, 1, (Hq + 2 Hk) D]
            q = w.q_norm(qkv[..., :q_width].view(b, 1, self.heads, d)).transpose(1, 2)
            k = w.k_norm(qkv[..., q_width : q_width + kv_width].view(b, 1, self.kv_heads, d))
            v = qkv[..., q_width + kv_width :].view(b, 1, self.kv_heads, d).transpose(1, 2)
            k = k.transpose(1, 2)  # [B, Hk, 1, D]
            q = q * cos + q.roll(half, -1) * sin_signed
            k = k * cos + k.roll(half, -1) * sin_signed
            keys, values = cache.update(index, k, v)  # [B, Hk, S, D]
            # The rep query heads sharing a KV head are that head's rep query rows.
            scores = (q.reshape(b, self.kv_heads, rep, d) @ keys.transpose(-1, -2)) * self.scale
            out = (scores.softmax(-1) @ values).reshape(b, 1, q_width)
            x = x + out @ w.o
            gate_up = w.post_norm(x) @ w.gate_up  # [B, 1, 2I]
            gate, up = gate_up.chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ w.down
        return self.final_norm(x)


class _PackedLayer:
    def __init__(self, layer):
        attn, mlp = layer.self_attn, layer.mlp
        fused = torch.cat((attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight))
        self.qkv = fused.t().contiguous()  # [H, (Hq + 2 Hk) D]
        self.o = attn.o_proj.weight.t().contiguous()
        self.gate_up = torch.cat((mlp.gate_proj.weight, mlp.up_proj.weight)).t().contiguous()
        self.down = mlp.down_proj.weight.t().contiguous()
        self.input_norm = _norm(layer.input_layernorm)
        self.post_norm = _norm(layer.post_attention_layernorm)
        self.q_norm, self.k_norm = _norm(attn.q_norm), _norm(attn.k_norm)


def _norm(module):
    """fp32: one fused rms_norm call (bitwise equal to RMSNorm.forward); other dtypes: the module,
    whose fp32-normalise-then-cast order rms_norm does not follow."""
    if module.weight.dtype != torch.float32:
        return module
    weight, eps = module.weight, module.eps
    return lambda x: F.rms_norm(x, (weight.shape[0],), weight, eps)
