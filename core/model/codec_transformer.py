"""The speech-tokenizer decoder's small causal transformer (docs/model.md, "Speech decoder").

Owns: LayerScale, sliding-window causal self-attention and the stack `pre_transformer`
(input_proj -> layers -> norm -> output_proj); RMSNorm, RoPE and the MLP are the shared ones of
core/model/layers.py. Attribute names mirror the checkpoint. Positions always start at 0: the
caller decodes each chunk as a fresh sequence. Knows nothing of codes, audio or chunking.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from qtts.core.model.layers import MLP, RMSNorm, rope_cos_sin, rope_inv_freq, rotate_half


@dataclass(frozen=True)
class TransformerDims:
    latent_dim: int  # width outside the stack (input_proj in, output_proj out)
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    sliding_window: int
    attention_bias: bool


class LayerScale(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, C]
        return self.scale * x


class SlidingWindowAttention(nn.Module):
    """Causal self-attention where query i sees keys i - window + 1 .. i (window keys in all)."""

    def __init__(self, d: TransformerDims):
        super().__init__()
        self.num_heads = d.num_attention_heads
        self.num_kv_heads = d.num_key_value_heads
        self.head_dim = d.head_dim
        q_width, kv_width = d.num_attention_heads * d.head_dim, d.num_key_value_heads * d.head_dim
        self.q_proj = nn.Linear(d.hidden_size, q_width, bias=d.attention_bias)
        self.k_proj = nn.Linear(d.hidden_size, kv_width, bias=d.attention_bias)
        self.v_proj = nn.Linear(d.hidden_size, kv_width, bias=d.attention_bias)
        self.o_proj = nn.Linear(q_width, d.hidden_size, bias=d.attention_bias)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:  # x [B, T, C]; cos/sin [T, D]; mask [T, T] bool (True = may attend)
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # [B,H,T,D]
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.num_kv_heads != self.num_heads:  # grouped heads: query head h reads kv h // rep
            rep = self.num_heads // self.num_kv_heads
            k = k.repeat_interleave(rep, dim=1)  # [B, H, T, D]
            v = v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim**-0.5)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))  # [B, T, C]


class TransformerLayer(nn.Module):
    """Pre-norm block; each branch is scaled per channel (LayerScale) before the residual add."""

    def __init__(self, d: TransformerDims):
        super().__init__()
        self.self_attn = SlidingWindowAttention(d)
        self.mlp = MLP(d.hidden_size, d.intermediate_size)
        self.input_layernorm = RMSNorm(d.hidden_size, d.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(d.hidden_size, d.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(d.hidden_size)
        self.mlp_layer_scale = LayerScale(d.hidden_size)

    def forward(self, x, cos, sin, mask):  # [B, T, C]
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class CodecTransformer(nn.Module):
    """input_proj -> sliding-window layers -> RMSNorm -> output_proj, positions 0..T-1."""

    def __init__(self, d: TransformerDims):
        super().__init__()
        self.sliding_window = d.sliding_window
        self.input_proj = nn.Linear(d.latent_dim, d.hidden_size)
        self.layers = nn.ModuleList([TransformerLayer(d) for _ in range(d.num_hidden_layers)])
        self.norm = RMSNorm(d.hidden_size, d.rms_norm_eps)
        self.output_proj = nn.Linear(d.hidden_size, d.latent_dim)
        self.head_dim = d.head_dim
        self.rope_theta = d.rope_theta

    def _rope(self, t: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Built in float32 on every call rather than kept as a buffer, which `.to(bfloat16)`
        # would round; it is not in the checkpoint either.
        inv_freq = rope_inv_freq(self.head_dim, self.rope_theta, x.device)  # [D / 2]
        return rope_cos_sin(torch.arange(t, device=x.device), inv_freq, x.dtype)  # [T, D] x 2

    def _mask(self, t: int, device: torch.device) -> torch.Tensor:
        i = torch.arange(t, device=device)
        offset = i[:, None] - i[None, :]  # [T, T] query index - key index
        return (offset >= 0) & (offset < self.sliding_window)  # [T, T] bool

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, latent] -> [B, T, latent]
        h = self.input_proj(x)  # [B, T, C]
        cos, sin = self._rope(h.shape[1], h)
        mask = self._mask(h.shape[1], h.device)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output_proj(self.norm(h))
