"""What a tiny Base (voice clone) checkpoint adds to the CustomVoice layout.

Owns the speaker encoder's config.json block and its weight draw (the ECAPA-TDNN whose tensors
`model.safetensors` carries as `speaker_encoder.*`), and the speech tokenizer's encoder half: its
`encoder_config` (a transformers MimiConfig) and `encoder.*` tensors under the names the published
speech tokenizer uses. The official code encodes the reference clip even in x-vector mode (and
drops the codes), so a Base checkpoint must carry the encoder; qtts reads it only for in-context
cloning. core/tiny/checkpoint.py calls these when `model_type="base"`.

Talkers of the published widths (the 0.6b and 1.7b presets) get the published ECAPA-TDNN
(512-channel blocks, 1536 aggregated), smaller ones a tiny one; every preset gets the tiny Mimi
encoder below, whose codes only in-context cloning reads.
Must not know: generation, prompts, or the rest of the checkpoint's files.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from qtts.core.model.speaker_encoder import SAMPLE_RATE, SpeakerEncoder, x_vector

# The published ECAPA-TDNN minus enc_dim (the talker's hidden size), and a tiny one.
# fmt: off
PUBLISHED_SPEAKER_ENCODER = {
    "mel_dim": 128, "enc_channels": [512, 512, 512, 512, 1536],
    "enc_kernel_sizes": [5, 3, 3, 3, 1], "enc_dilations": [1, 2, 3, 4, 1],
    "enc_attention_channels": 128, "enc_res2net_scale": 8, "enc_se_channels": 128,
    "sample_rate": SAMPLE_RATE,
}
TINY_SPEAKER_ENCODER = {
    **PUBLISHED_SPEAKER_ENCODER, "enc_channels": [16, 16, 16, 16, 48],
    "enc_attention_channels": 8, "enc_res2net_scale": 4, "enc_se_channels": 8,
}
# A tiny Mimi encoder (transformers MimiConfig keys): 16 quantizers of 2048 codes, 1920 samples
# per frame (SEANet ratios 8, 6, 5, 4 and a x2 downsample), one transformer layer.
MIMI_ENCODER = {
    "sampling_rate": SAMPLE_RATE, "audio_channels": 1, "hidden_size": 16, "num_filters": 4,
    "num_residual_layers": 1, "upsampling_ratios": [8, 6, 5, 4], "kernel_size": 7,
    "last_kernel_size": 3, "residual_kernel_size": 3, "dilation_growth_rate": 2,
    "use_causal_conv": True, "pad_mode": "constant", "compress": 2, "trim_right_ratio": 1.0,
    "codebook_size": 2048, "codebook_dim": 4, "num_quantizers": 16, "use_conv_shortcut": False,
    "vector_quantization_hidden_dimension": 4, "num_semantic_quantizers": 1,
    "upsample_groups": 16, "num_hidden_layers": 1, "intermediate_size": 32,
    "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "hidden_act": "gelu",
    "max_position_embeddings": 8000, "norm_eps": 1e-5, "use_cache": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "sliding_window": 250,
    "attention_dropout": 0.0, "layer_scale_initial_scale": 0.01, "attention_bias": False,
    "frame_rate": 12.5,
}
# fmt: on
PUBLISHED_MIN_HIDDEN = 1024  # the 0.6B talker's width
XVECTOR_STD = 0.5  # the x-vector's level: that of the drawn codec embeddings it sits among
# Mimi module names the newer transformers nests under `encoder.` -> the published names.
_NESTED = {"encoder.encoder_seanet.": "encoder.", "encoder.encoder_transformer.":
           "encoder_transformer.", "encoder.downsample.": "downsample."}  # fmt: skip
_DECODER_HALF = ("decoder", "decoder_transformer", "upsample")


def speaker_encoder_config(hidden: int) -> dict[str, Any]:
    """config.json's `speaker_encoder_config`: the x-vector is one talker input, so enc_dim is
    the talker's hidden size; the published network beside a published talker width (1024 or
    more), the tiny one otherwise."""
    block = PUBLISHED_SPEAKER_ENCODER if hidden >= PUBLISHED_MIN_HIDDEN else TINY_SPEAKER_ENCODER
    return {**block, "enc_dim": hidden}


def draw_speaker_encoder(encoder: SpeakerEncoder, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """`speaker_encoder.*` tensors: convolutions N(0, 1/fan_in) (the ReLU stack then shrinks
    rather than compounds), biases N(0, 0.1^2); the last conv rescaled so a noise clip's
    x-vector has std XVECTOR_STD."""
    out = {}
    for name, ref in sorted(encoder.state_dict().items()):
        noise = torch.randn(ref.shape, generator=gen)  # ref.shape, fp32
        fan_in = math.prod(ref.shape[1:]) if ref.dim() > 1 else 0
        out[name] = noise / math.sqrt(fan_in) if fan_in else 0.1 * noise
    encoder.load_state_dict(out)
    clip = torch.randn(2 * SAMPLE_RATE, generator=gen).numpy().astype(np.float32) * 0.1  # 2 s
    level = float(x_vector(encoder, clip).float().std())
    with torch.no_grad():
        encoder.fc.weight.mul_(XVECTOR_STD / max(level, 1e-6))
        encoder.fc.bias.mul_(XVECTOR_STD / max(level, 1e-6))
    return {f"speaker_encoder.{k}": v.clone() for k, v in encoder.state_dict().items()}


def _published_name(name: str) -> str | None:
    """A transformers MimiModel state-dict name -> the speech tokenizer's `encoder.*` name, or
    None for the decoder half (the speech tokenizer stores the encoder half only)."""
    for nested, flat in _NESTED.items():
        if name.startswith(nested):
            return "encoder." + flat + name[len(nested) :]
    if name.split(".", 1)[0] in _DECODER_HALF:
        return None
    return "encoder." + name


def mimi_encoder_tensors(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Random `encoder.*` tensors of MIMI_ENCODER under the published names: weights
    N(0, 1/fan_in), norms 1 + N(0, 0.1^2), biases and layer scales 0.1 N(0, 1), codebooks
    N(0, 1) with usage 1 + |N(0, 0.1^2)| and `initialized` set."""
    from transformers import MimiConfig, MimiModel

    model = MimiModel(MimiConfig(**MIMI_ENCODER))
    out = {}
    for name, ref in sorted(model.state_dict().items()):
        key = _published_name(name)
        if key is None:
            continue
        noise = torch.randn(ref.shape, generator=gen)  # ref.shape, fp32
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "initialized":
            value = torch.ones(ref.shape)
        elif leaf == "cluster_usage":
            value = 1.0 + 0.1 * noise.abs()
        elif leaf == "embed_sum":
            value = noise
        elif "norm" in name and leaf == "weight":
            value = 1.0 + 0.1 * noise
        elif ref.dim() > 1:
            value = noise / math.sqrt(math.prod(ref.shape[1:]))
        else:
            value = 0.1 * noise
        out[key] = value
    return out


def base_speech_tokenizer(st_config: dict[str, Any], gen: torch.Generator) -> tuple[dict, dict]:
    """(speech_tokenizer/config.json with `encoder_config`, the `encoder.*` tensors)."""
    return {**st_config, "encoder_config": dict(MIMI_ENCODER)}, mimi_encoder_tensors(gen)
