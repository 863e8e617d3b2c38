"""Speech-tokenizer decoder: 16-codebook codes at 12.5 Hz -> 24 kHz audio (docs/model.md, "Speech
decoder").

Owns `SpeechDecoderConfig` (from speech_tokenizer/config.json), the `SpeechDecoder` module (its
state_dict keys are the checkpoint's `decoder.*` names without the prefix) and
`decode_utterances`, which reproduces the official decode of a list of utterances: pad to a common
length, decode in 300-frame chunks (each after the first with 25 frames of left context whose audio
is dropped, positions restarting per chunk), cut each utterance to frames * upsample samples.
Plain torch; knows nothing of text, the talker, files or how weights are read from disk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from qtts.core.model.codec_modules import (
    SNAKE_EPS,
    CausalConv1d,
    CausalConvTranspose1d,
    ConvNeXtBlock,
    DecoderBlock,
    SnakeBeta,
    SplitResidualCodebooks,
)
from qtts.core.model.codec_transformer import CodecTransformer, TransformerDims

# Defaults of the official decoder config class, used when config.json leaves a key out
# (the official code would silently use the same values).
_DECODER_DEFAULTS: dict[str, Any] = {
    "codebook_size": 2048,
    "hidden_size": 1024,
    "latent_dim": 1024,
    "rope_theta": 10000.0,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "attention_bias": False,
    "sliding_window": 72,
    "intermediate_size": 3072,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "num_hidden_layers": 8,
    "num_quantizers": 16,
    "upsample_rates": (8, 5, 4, 3),
    "upsampling_ratios": (2, 2),
    "decoder_dim": 1536,
}


@dataclass(frozen=True)
class SpeechDecoderConfig:
    codebook_size: int
    codebook_dim: int  # RVQ output width (codebooks themselves are codebook_dim // 2 wide)
    latent_dim: int
    decoder_dim: int
    num_quantizers: int
    upsample_rates: tuple[int, ...]  # decoder blocks, channels halve at each
    upsampling_ratios: tuple[int, ...]  # ConvNeXt upsampling stages before the decoder blocks
    transformer: TransformerDims
    sample_rate: int = 24000
    upsample: int = 1920  # output samples per frame

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeechDecoderConfig:
        """Build from the whole speech_tokenizer/config.json dict."""
        if "decoder_config" not in d:
            raise ValueError("speech_tokenizer/config.json: missing key 'decoder_config'")
        dec = {**_DECODER_DEFAULTS, **d["decoder_config"]}
        if "codebook_dim" not in dec:  # the official config class has no default for it
            raise ValueError(
                "speech_tokenizer/config.json: missing key 'decoder_config.codebook_dim'"
            )
        if dec["hidden_act"] != "silu":
            raise ValueError(f"speech tokenizer: hidden_act {dec['hidden_act']!r} unsupported")
        rope = dec.get("rope_parameters") or {}
        if "rope_theta" not in d["decoder_config"] and "rope_theta" in rope:
            dec["rope_theta"] = rope["rope_theta"]  # transformers 5 may nest it
        dims = TransformerDims(
            latent_dim=int(dec["latent_dim"]),
            hidden_size=int(dec["hidden_size"]),
            intermediate_size=int(dec["intermediate_size"]),
            num_hidden_layers=int(dec["num_hidden_layers"]),
            num_attention_heads=int(dec["num_attention_heads"]),
            num_key_value_heads=int(dec["num_key_value_heads"]),
            head_dim=int(dec.get("head_dim") or dec["hidden_size"] // dec["num_attention_heads"]),
            rms_norm_eps=float(dec["rms_norm_eps"]),
            rope_theta=float(dec["rope_theta"]),
            sliding_window=int(dec["sliding_window"]),
            attention_bias=bool(dec["attention_bias"]),
        )
        cfg = cls(
            codebook_size=int(dec["codebook_size"]),
            codebook_dim=int(dec["codebook_dim"]),
            latent_dim=int(dec["latent_dim"]),
            decoder_dim=int(dec["decoder_dim"]),
            num_quantizers=int(dec["num_quantizers"]),
            upsample_rates=tuple(int(r) for r in dec["upsample_rates"]),
            upsampling_ratios=tuple(int(r) for r in dec["upsampling_ratios"]),
            transformer=dims,
            sample_rate=int(d.get("output_sample_rate", 24000)),
            upsample=int(d.get("decode_upsample_rate", 1920)),
        )
        cfg._validate()
        return cfg

    def _validate(self) -> None:
        total = math.prod(self.upsample_rates + self.upsampling_ratios)
        if total != self.upsample:
            raise ValueError(
                f"speech tokenizer: decode_upsample_rate {self.upsample} != product of "
                f"upsample_rates and upsampling_ratios ({total})"
            )
        if self.num_quantizers < 2:
            raise ValueError("speech tokenizer: num_quantizers must be >= 2")
        if self.decoder_dim % 2 ** len(self.upsample_rates):
            raise ValueError("speech tokenizer: decoder_dim must halve once per upsample rate")
        t = self.transformer
        if t.num_attention_heads % t.num_key_value_heads:
            raise ValueError("speech tokenizer: num_attention_heads must divide by kv heads")


class SpeechDecoder(nn.Module):
    """codes [B, Q, T] -> audio [B, T * upsample] in [-1, 1]. Causal end to end."""

    def __init__(self, cfg: SpeechDecoderConfig):
        super().__init__()
        self.cfg = cfg
        latent = cfg.latent_dim
        self.quantizer = SplitResidualCodebooks(
            cfg.num_quantizers, cfg.codebook_size, cfg.codebook_dim
        )
        self.pre_conv = CausalConv1d(cfg.codebook_dim, latent, 3)
        self.pre_transformer = CodecTransformer(cfg.transformer)
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalConvTranspose1d(latent, latent, r, r), ConvNeXtBlock(latent)])
            for r in cfg.upsampling_ratios
        )
        widths = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        self.decoder = nn.ModuleList(
            [
                CausalConv1d(latent, cfg.decoder_dim, 7),
                *(
                    DecoderBlock(widths[i], widths[i + 1], rate)
                    for i, rate in enumerate(cfg.upsample_rates)
                ),
                SnakeBeta(widths[-1]),
                CausalConv1d(widths[-1], 1, 7),
            ]
        )

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        if codes.dim() != 3 or codes.shape[1] != self.cfg.num_quantizers:
            raise ValueError(
                f"SpeechDecoder: codes must be [B, {self.cfg.num_quantizers}, T], "
                f"got {tuple(codes.shape)}"
            )
        h = self.quantizer.decode(codes)  # [B, codebook_dim, T]
        h = self.pre_conv(h)  # [B, latent, T]
        h = self.pre_transformer(h.transpose(1, 2)).transpose(1, 2)  # [B, latent, T]
        for stage in self.upsample:
            for layer in stage:
                h = layer(h)  # [B, latent, T * ratio so far]
        *body, snake, conv = self.decoder
        for layer in body:
            h = layer(h)  # ends at [B, decoder_dim / 2^blocks, T * upsample]
        # Two statements, as the layers ran in one loop: the block's output dies before the conv
        if h.is_cuda and snake.cuda_op is not None:  # SnakeBeta writes the conv's padding
            h = snake.cuda_op(h, snake.alpha, snake.beta, SNAKE_EPS, conv.left_pad)
            h = conv.forward_padded(h)  # [B, 1, T * upsample]
        else:
            h = snake(h)
            h = conv(h)
        return h.clamp(min=-1.0, max=1.0).squeeze(1)  # [B, T * upsample]


@torch.inference_mode()
def decode_utterances(
    decoder: SpeechDecoder,
    codes: list[torch.Tensor],
    chunk_size: int = 300,
    left_context: int = 25,
) -> list[torch.Tensor]:
    """Decode utterances (each codes [T_i, Q]) in one padded batch -> float32 audio [T_i * up].

    Matches the official decode of a list: padded frames decode as code 0 (the official pads with
    -1, then clamps to 0; negative codes are clamped the same way) and, everything being causal,
    never change the frames before them. Chunk boundaries are absolute frame indices shared by the
    batch, so each utterance gets the same chunks it would get alone. Rows already complete are
    left out of later chunks (their audio there would be cut anyway). Audio stays on the decoder's
    device; the returned tensors are row views of one buffer.
    """
    if chunk_size < 1 or left_context < 0:
        raise ValueError("decode_utterances: need chunk_size >= 1 and left_context >= 0")
    q, up = decoder.cfg.num_quantizers, decoder.cfg.upsample
    for i, c in enumerate(codes):
        if c.dim() != 2 or c.shape[1] != q:
            raise ValueError(f"decode_utterances: codes[{i}] must be [frames, {q}], got {c.shape}")
    if not codes:
        return []
    device = next(decoder.parameters()).device
    lengths = [int(c.shape[0]) for c in codes]
    t_max = max(lengths)
    batch = torch.zeros(len(codes), t_max, q, dtype=torch.long, device=device)  # [B, T, Q]
    for i, c in enumerate(codes):
        batch[i, : lengths[i]] = c.to(device=device, dtype=torch.long).clamp(min=0)
    batch = batch.transpose(1, 2)  # [B, Q, T]
    audio = torch.zeros(len(codes), t_max * up, dtype=torch.float32, device=device)  # [B, S]
    for start in range(0, t_max, chunk_size):
        end = min(start + chunk_size, t_max)
        context = min(left_context, start)  # official: fewer only when start < left_context
        rows = [i for i, n in enumerate(lengths) if n > start]
        if len(rows) == len(lengths):
            wav = decoder(batch[:, :, start - context : end])  # [B, (end - start + context) * up]
            audio[:, start * up : end * up] = wav[:, context * up :]
        else:
            idx = torch.tensor(rows, device=device)
            wav = decoder(batch[idx, :, start - context : end])  # [b, (end-start+context) * up]
            audio[idx, start * up : end * up] = wav[:, context * up :].float()
    return [audio[i, : n * up] for i, n in enumerate(lengths)]
