"""The layers both transformers share: the talker stacks (core/model/talker.py) and the speech
decoder's small transformer (core/model/codec_transformer.py) normalise, rotate and gate the same
way, so each piece is written once here. Attribute names mirror the checkpoints."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """Normalises in float32, casts back, then scales in the input dtype (the published order,
    which bf16 parity depends on)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., C]
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., C]
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] over the last dim (RoPE's pairing of dims i and i + D/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_inv_freq(head_dim: int, theta: float, device) -> torch.Tensor:
    """inv_freq [D/2] in float32, computed as the published code does."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float()
    return 1.0 / (theta ** (exponents / head_dim))


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype):
    """cos, sin [..., D] for integer positions [...]: angles in float32, then cast to dtype."""
    freqs = positions[..., None].float() * inv_freq.float()  # [..., D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [..., D]
    return emb.cos().to(dtype), emb.sin().to(dtype)
