"""Build and write the ONE tiny 12 Hz speech tokenizer shared by all golden checkpoints.

Owns: the tiny Qwen3TTSTokenizerV2 config (Mimi encoder + 12 Hz decoder; real codebook size,
quantizer count, upsample rates and 1920 samples/frame), its weight draw, and writing
config.json / model.safetensors / preprocessor_config.json.

Must not know: talker checkpoints or cases.
"""

from __future__ import annotations

import math
from pathlib import Path

from oracle_env import write_json

SEED = 1200
FINAL_CONV = 6  # index of the last causal conv in decoder.decoder
FINAL_GAIN = 0.6

DECODER_CONFIG = {
    "codebook_size": 2048,
    "codebook_dim": 8,  # RVQ works at codebook_dim // 2 = 4, output_proj back to 8
    "hidden_size": 16,
    "latent_dim": 16,
    "head_dim": 8,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "max_position_embeddings": 8000,
    "rope_theta": 10000,
    "sliding_window": 72,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "layer_scale_initial_scale": 0.01,
    "rms_norm_eps": 1e-5,
    "num_quantizers": 16,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "decoder_dim": 32,  # channels 32 -> 16 -> 8 -> 4 -> 2
}

ENCODER_CONFIG = {
    "sampling_rate": 24000,
    "audio_channels": 1,
    "hidden_size": 16,
    "num_filters": 4,
    "num_residual_layers": 1,
    "upsampling_ratios": [8, 6, 5, 4],
    "kernel_size": 7,
    "last_kernel_size": 3,
    "residual_kernel_size": 3,
    "dilation_growth_rate": 2,
    "use_causal_conv": True,
    "pad_mode": "constant",
    "compress": 2,
    "trim_right_ratio": 1.0,
    "codebook_size": 2048,
    "codebook_dim": 4,
    "num_quantizers": 16,
    "use_conv_shortcut": False,
    "vector_quantization_hidden_dimension": 4,
    "num_semantic_quantizers": 1,
    "upsample_groups": 16,
    "num_hidden_layers": 1,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "hidden_act": "gelu",
    "max_position_embeddings": 8000,
    "norm_eps": 1e-5,
    "use_cache": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "sliding_window": 250,
    "attention_dropout": 0.0,
    "layer_scale_initial_scale": 0.01,
    "attention_bias": False,
    "frame_rate": 12.5,
}


def tokenizer_config() -> dict:
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_config": dict(ENCODER_CONFIG),
        "decoder_config": dict(DECODER_CONFIG),
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
        "transformers_version": "4.57.3",
    }


def _draw_(model, seed: int) -> None:
    """Fan-in scaled draw so the deep conv stack keeps O(1) activations (audio not all clipped)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            if "cluster_usage" in name:
                p.copy_(1.0 + 0.1 * noise.abs())
            elif "embedding_sum" in name or "embed_sum" in name:
                p.copy_(noise)
            elif p.dim() >= 2:
                fan_in = math.prod(p.shape[1:])
                p.copy_(noise / math.sqrt(max(fan_in, 1)))
            elif leaf == "scale":
                p.copy_(0.3 + 0.1 * noise)
            elif leaf == "gamma":
                p.copy_(0.3 + 0.1 * noise)
            elif "norm" in name and leaf == "weight":
                p.copy_(1.0 + 0.1 * noise)
            else:  # biases, SnakeBeta alpha/beta (log-scale), anything else 1-D
                p.copy_(0.1 * noise)
            if ".block." in name and ".conv2." in name and leaf == "weight":
                p.mul_(0.3)  # keep the residual units from compounding x2-3 per block
            if name == f"decoder.decoder.{FINAL_CONV}.conv.weight":
                p.mul_(FINAL_GAIN)  # final audio std ~0.3, few samples at the +-1 clamp


def build_model():
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model

    cfg_dict = tokenizer_config()
    cfg = Qwen3TTSTokenizerV2Config(
        encoder_config=cfg_dict["encoder_config"],
        decoder_config=cfg_dict["decoder_config"],
        encoder_valid_num_quantizers=16,
        decode_upsample_rate=1920,
        encode_downsample_rate=1920,
    )
    model = Qwen3TTSTokenizerV2Model(cfg).eval()
    _draw_(model, SEED)
    return model


def write_speech_tokenizer(out_dir: Path) -> Path:
    """Write the tiny speech tokenizer dir (fp32 weights, like the published one)."""
    import torch
    from oracle_env import save_weights
    from transformers import EncodecFeatureExtractor

    out_dir.mkdir(parents=True, exist_ok=True)
    model = build_model()
    write_json(out_dir / "config.json", tokenizer_config())
    save_weights(model, out_dir / "model.safetensors", torch.float32)
    fe = EncodecFeatureExtractor(feature_size=1, sampling_rate=24000)
    fe.save_pretrained(str(out_dir))
    return out_dir
