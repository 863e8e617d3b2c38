"""Tiny Qwen3-TTS checkpoints (cv17, cv06, vd) in the published directory layout.

Owns: each checkpoint's config.json dict (real codec/token ids, tiny dims), building the official
Qwen3TTSForConditionalGeneration from it, the std-0.1 weight draw, and writing the directory
(config, greedy generation_config, weights in the storage dtype, tiny text tokenizer, relative
speech_tokenizer symlink).

Must not know: cases, EOS aiming (it only accepts an EOS row to store), fixture npz files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from oracle_env import load_tiny_tokenizer_module, redraw_, round_through_, save_weights, write_json

CODEC_EOS = 2150

SPK_ID = {
    "serena": 3066,
    "vivian": 3065,
    "uncle_fu": 3010,
    "ryan": 3061,
    "aiden": 2861,
    "ono_anna": 2873,
    "sohee": 2864,
    "eric": 2875,
    "dylan": 2878,
}
SPK_IS_DIALECT = {
    "serena": False,
    "vivian": False,
    "uncle_fu": False,
    "ryan": False,
    "aiden": False,
    "ono_anna": False,
    "sohee": False,
    "eric": "sichuan_dialect",
    "dylan": "beijing_dialect",
}
LANGUAGES = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "italian": 2070,
    "portuguese": 2071,
    "spanish": 2054,
    "japanese": 2058,
    "korean": 2064,
    "french": 2061,
    "russian": 2069,
}
DIALECTS = {"beijing_dialect": 2074, "sichuan_dialect": 2062}

# The real generation_config.json with sampling switched off (greedy parity).
GENERATION_CONFIG = {
    "do_sample": False,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": False,
    "subtalker_temperature": 0.9,
    "subtalker_top_p": 1.0,
    "subtalker_top_k": 50,
    "max_new_tokens": 8192,
}


@dataclass(frozen=True)
class Spec:
    name: str
    model_type: str  # custom_voice | voice_design
    size: str  # 1b7 | 0b6
    talker_hidden: int
    predictor_hidden: int
    storage_dtype: str  # float32 | bfloat16 | float16
    seed: int


SPECS = {
    "cv17": Spec("cv17", "custom_voice", "1b7", 16, 8, "float32", 1701),
    "cv06": Spec("cv06", "custom_voice", "0b6", 8, 8, "bfloat16", 601),
    "vd": Spec("vd", "voice_design", "1b7", 16, 8, "float16", 1702),
}


def _talker_config(spec: Spec, text_vocab: int) -> dict:
    custom = spec.model_type == "custom_voice"
    predictor = {
        "vocab_size": 2048,
        "hidden_size": spec.predictor_hidden,
        "intermediate_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "hidden_act": "silu",
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "layer_types": ["full_attention", "full_attention"],
        "num_code_groups": 16,
    }
    return {
        "code_predictor_config": predictor,
        "vocab_size": 3072,
        "hidden_size": spec.talker_hidden,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,  # q_proj wider than hidden, like the real 0.6B
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        # Sections sum to head_dim / 2; identical rows make this plain 1-D RoPE.
        "rope_scaling": {"interleaved": True, "mrope_section": [3, 3, 2], "rope_type": "default"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "num_code_groups": 16,
        "text_hidden_size": 16,
        "text_vocab_size": text_vocab,
        "position_id_per_seconds": 13,
        "codec_eos_token_id": CODEC_EOS,
        "codec_think_id": 2154,
        "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156,
        "codec_think_eos_id": 2157,
        "codec_pad_id": 2148,
        "codec_bos_id": 2149,
        "codec_language_id": {**LANGUAGES, **DIALECTS} if custom else dict(LANGUAGES),
        "spk_id": dict(SPK_ID) if custom else {},
        "spk_is_dialect": dict(SPK_IS_DIALECT) if custom else {},
    }


def model_config(spec: Spec, tok_ids: dict, assistant_id: int) -> dict:
    """The config.json dict (sub-configs without model_type, as save_pretrained cannot run)."""
    return {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": spec.size,
        "tts_model_type": spec.model_type,
        "im_start_token_id": tok_ids["<|im_start|>"],
        "im_end_token_id": tok_ids["<|im_end|>"],
        "tts_pad_token_id": tok_ids["<tts_pad>"],
        "tts_bos_token_id": tok_ids["<tts_text_bos>"],
        "tts_eos_token_id": tok_ids["<tts_text_eod>"],
        "assistant_token_id": assistant_id,
        "talker_config": _talker_config(spec, tok_ids["vocab_size"]),
        "speaker_encoder_config": {"enc_dim": spec.talker_hidden, "sample_rate": 24000},
        "torch_dtype": spec.storage_dtype,
        "transformers_version": "4.57.3",
    }


def tokenizer_ids() -> tuple[dict, int]:
    """Special ids of the tiny tokenizer and the single-token id of "assistant"."""
    mod = load_tiny_tokenizer_module()
    vocab, _, specials = mod.build_vocab()
    ids = dict(specials)
    ids["vocab_size"] = len(vocab) + len(specials)
    return ids, vocab["assistant"]


def widen_paths_(model) -> None:
    """After redraw_: scale the paths that random std-0.1 weights leave too weak to matter, and zero
    the EOS row of the codec head (aimed later; never wins at zero). Shared by every checkpoint."""
    import torch

    with torch.no_grad():
        # Text must matter next to the codec stream: widen the text path (P(ids) ~ O(1)).
        model.talker.model.text_embedding.weight.mul_(10.0)
        model.talker.text_projection.linear_fc1.weight.mul_(3.0)
        model.talker.text_projection.linear_fc2.weight.mul_(3.0)
        # Codec embeddings carry the feedback; at std 0.1 the predictor's later groups collapse
        # to the projection bias and emit constant codes.
        model.talker.model.codec_embedding.weight.mul_(3.0)
        for emb in model.talker.code_predictor.model.codec_embedding:
            emb.weight.mul_(5.0)
        proj = model.talker.code_predictor.small_to_mtp_projection
        if isinstance(proj, torch.nn.Linear):
            proj.weight.mul_(3.0)
        model.talker.codec_head.weight[CODEC_EOS].zero_()


def build_model(spec: Spec):
    """Official model with re-drawn weights, rounded through the storage dtype."""
    import torch
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

    tok_ids, assistant_id = tokenizer_ids()
    cfg_dict = model_config(spec, tok_ids, assistant_id)
    cfg = Qwen3TTSConfig(**{k: v for k, v in cfg_dict.items() if k != "model_type"})
    model = Qwen3TTSForConditionalGeneration(cfg).eval()
    redraw_(model, spec.seed)
    widen_paths_(model)
    round_through_(model, getattr(torch, spec.storage_dtype))
    return model, cfg_dict


def write_checkpoint(spec: Spec, model, cfg_dict: dict, out_dir: Path) -> Path:
    """Write the published layout; `speech_tokenizer` is a relative symlink to the shared dir."""
    import torch

    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "config.json", cfg_dict)
    write_json(out_dir / "generation_config.json", GENERATION_CONFIG)
    save_weights(model, out_dir / "model.safetensors", getattr(torch, spec.storage_dtype))
    load_tiny_tokenizer_module().write_tiny_tokenizer(out_dir)
    link = out_dir / "speech_tokenizer"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink("../speech_tokenizer", link)
    return out_dir


def set_eos_row(model, row, dtype_name: str) -> None:
    """Store the aimed EOS row, rounded like every other weight."""
    import torch

    with torch.no_grad():
        w = torch.as_tensor(row, dtype=torch.float32).to(getattr(torch, dtype_name))
        model.talker.codec_head.weight[CODEC_EOS].copy_(w.to(torch.float32))
