"""Plain-PyTorch Qwen3-TTS talker and code predictor (eager; every speed trick lives in the engine).

Module names mirror the checkpoint's state-dict names (docs/model.md, "Checkpoint layout"), so a
strict load needs no renaming. Knows tensors and token ids, not text, files or sampling.

Attention follows the official SDPA dispatch so greedy codes match bit for bit on CPU: without a
padding mask, SDPA runs causal with native GQA; with one, K/V are repeated and a boolean mask is
used. A KV cache may bring its own `attend` (the engine's decode view does, for its GPU path); the
model itself has no device-specific branches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from qtts.core.model.config import DecoderStackConfig, ModelConfig, TalkerConfig
from qtts.core.model.layers import MLP, RMSNorm, rope_cos_sin, rope_inv_freq, rotate_half


class KVCache(Protocol):
    """Per-layer K/V store: `update` appends (or writes) and returns all keys/values to attend.
    It may also define `attend` (same signature as `attend` below) to replace the default."""

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


class RotaryEmbedding(nn.Module):
    """1-D RoPE (the talker's MRoPE with equal sections reduces to this for text-only input)."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        # Computed on the CPU explicitly: cheap, and a meta-device build (weights loaded after)
        # keeps a real table, which the loader then moves to the device.
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", self.table("cpu"), persistent=False)

    def table(self, device) -> torch.Tensor:
        return rope_inv_freq(self.head_dim, self.theta, device)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype):  # [B, T] -> [B, T, D] x 2
        return rope_cos_sin(positions, self.inv_freq, dtype)


def embedding(num: int, dim: int) -> nn.Embedding:
    """An embedding whose weight is left uninitialised: checkpoints overwrite it, and the default
    init on the meta device costs seconds (it imports torch._dynamo)."""
    return nn.Embedding(num, dim, _weight=torch.empty(num, dim))


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, t, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)  # [B, H*rep, T, D]


class Attention(nn.Module):
    def __init__(self, cfg: DecoderStackConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, q_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, kv_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, kv_dim, bias=False)
        self.o_proj = nn.Linear(q_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask, cache: KVCache | None):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, -1, self.head_dim)).transpose(1, 2)  # [B,H,T,D]
        k = self.k_norm(self.k_proj(x).view(b, t, -1, self.head_dim)).transpose(1, 2)  # [B,Hk,T,D]
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)  # [B,Hk,T,D]
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, D]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        attention = attend
        if cache is not None:
            k, v = cache.update(self.layer, k, v)  # [B, Hk, S, D]
            attention = getattr(cache, "attend", attend)
        out = attention(q, k, v, mask, scale=self.scale, n_rep=self.num_heads // self.num_kv_heads)
        # reshape, not view: CUDA SDPA kernels return [B, H, T, D] laid out as [B, T, H, D].
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


def attend(q, k, v, mask: torch.Tensor | None, scale: float, n_rep: int) -> torch.Tensor:
    """SDPA as the official code dispatches it. mask: bool [B, 1, T, S] (True = attend) or None."""
    if mask is None:
        causal = q.shape[2] > 1
        if causal and k.shape[2] > q.shape[2]:
            raise ValueError("an unmasked causal query block must start at position 0")
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=True
        )
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderStackConfig, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x, cos, sin, mask, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderStack(nn.Module):
    """Pre-norm Qwen3 decoder: layers + final norm. Returns final-norm hidden states [B, T, H]."""

    def __init__(self, cfg: DecoderStackConfig):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)

    def forward(self, x, positions, mask=None, cache: KVCache | None = None) -> torch.Tensor:
        # x [B, T, H]; positions [B, T] int64; mask bool [B, 1, T, S] or None (no padding anywhere)
        cos, sin = self.rotary_emb(positions, x.dtype)  # [B, T, D] each
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache)
        return self.norm(x)


class TalkerModel(DecoderStack):
    def __init__(self, cfg: TalkerConfig):
        super().__init__(cfg)
        self.codec_embedding = embedding(cfg.vocab_size, cfg.hidden_size)
        self.text_embedding = embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class TextProjection(nn.Module):
    """text_hidden -> talker hidden: fc1 (+bias), SiLU, fc2 (+bias)."""

    def __init__(self, text_hidden: int, hidden: int):
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class CodePredictorModel(DecoderStack):
    def __init__(self, cfg: DecoderStackConfig, talker_hidden: int):
        super().__init__(cfg)
        # Embeddings for codebooks 1..G-1 live at TALKER width: the talker sums them too.
        n = cfg.num_code_groups - 1
        self.codec_embedding = nn.ModuleList(
            embedding(cfg.vocab_size, talker_hidden) for _ in range(n)
        )


class CodePredictor(nn.Module):
    def __init__(self, cfg: DecoderStackConfig, talker_hidden: int):
        super().__init__()
        self.model = CodePredictorModel(cfg, talker_hidden)
        n = cfg.num_code_groups - 1
        self.lm_head = nn.ModuleList(
            nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) for _ in range(n)
        )
        if cfg.hidden_size != talker_hidden:
            self.small_to_mtp_projection = nn.Linear(talker_hidden, cfg.hidden_size, bias=True)
        else:
            self.small_to_mtp_projection = nn.Identity()

    def residual_codes(
        self,
        start: torch.Tensor,  # [B, 2, Ht]: the talker state that produced c0, and C(c0)
        cache: KVCache,  # empty for this frame; positions are frame-local, 0..G-1
        choose: Callable[
            [torch.Tensor, int], torch.Tensor
        ],  # (fp32 logits [B, V], codebook) -> [B]
        one_token_step: Callable | None = None,  # replaces self.model for the one-token steps
        first_step: Callable | None = None,  # replaces self.model for the 2-token prefill
    ) -> torch.Tensor:
        """Codebooks 1..G-1 of one frame (docs/model.md, "Decode loop"): a 2-token prefill at
        positions 0, 1 and lm_head[0] give code 1; code j is fed back (its own embedding, talker
        width, through the projection) at position j + 1 and lm_head[j] gives code j + 1. -> int64
        [B, G - 1]."""
        b = start.shape[0]
        positions = torch.arange(len(self.lm_head) + 1, device=start.device)  # [G]
        x, codes = start, []
        for j, head in enumerate(self.lm_head):
            n, first = x.shape[1], 0 if j == 0 else j + 1
            pos = positions[first : first + n].expand(b, n)  # [B, n]
            step = (first_step if n > 1 else one_token_step) or self.model
            hidden = step(self.small_to_mtp_projection(x), pos, None, cache)  # [B, n, Hc]
            codes.append(choose(head(hidden)[:, -1].float(), j + 1))  # [B]
            if j + 1 < len(self.lm_head):  # the last code is never fed back
                x = self.model.codec_embedding[j](codes[-1][:, None])  # [B, 1, Ht]
        return torch.stack(codes, dim=1)  # [B, G - 1]


class Talker(nn.Module):
    def __init__(self, cfg: TalkerConfig, predictor_cfg: DecoderStackConfig):
        super().__init__()
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, cfg.hidden_size)
        self.codec_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(predictor_cfg, cfg.hidden_size)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """P(ids): text embedding through the text projection. ids [..., T] -> [..., T, H]."""
        return self.text_projection(self.model.text_embedding(ids))

    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor:
        """C(ids): talker codec embedding rows. ids [..., T] -> [..., T, H]."""
        return self.model.codec_embedding(ids)

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        """Sum of a frame's code embeddings: C(c0) + sum_q E_q(c_q). codes [..., G] -> [..., H]."""
        tables = [self.model.codec_embedding, *self.code_predictor.model.codec_embedding]
        parts = [table(codes[..., q : q + 1]) for q, table in enumerate(tables)]  # G x [..., 1, H]
        # One reduction over the stacked group axis, like the official code (bitwise-equal sums).
        return torch.cat(parts, dim=-2).sum(-2)  # [..., H]


class Qwen3TTS(nn.Module):
    """Root module; `speaker_encoder` exists on Base checkpoints only."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.talker = Talker(config.talker, config.code_predictor)
        if config.tts_model_type == "base":
            from qtts.core.model.speaker_encoder import SpeakerEncoder  # Base only

            self.speaker_encoder = SpeakerEncoder(config.speaker_encoder)


def build_model(config: ModelConfig) -> Qwen3TTS:
    """An uninitialised model (weights on the meta device are fine); load weights strictly after."""
    return Qwen3TTS(config)
