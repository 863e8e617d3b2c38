"""Tiny in-memory random models + tokenizer for unit tests (no files from fixtures needed)."""

import torch

from qtts.core.model.config import ModelConfig
from qtts.core.model.talker import build_model
from qtts.core.synthesis.prompt import load_tokenizer
from qtts.core.tiny.tokenizer import write_tiny_tokenizer


def tiny_config(
    ids: dict, *, model_type="custom_voice", talker_hidden=16, heads=2, kv_heads=1
) -> ModelConfig:
    return ModelConfig.from_dict(
        {
            "model_type": "qwen3_tts",
            "tts_model_type": model_type,
            "tts_model_size": "1b7",
            "im_start_token_id": ids["<|im_start|>"],
            "im_end_token_id": ids["<|im_end|>"],
            "tts_pad_token_id": ids["<tts_pad>"],
            "tts_bos_token_id": ids["<tts_text_bos>"],
            "tts_eos_token_id": ids["<tts_text_eod>"],
            "talker_config": {
                "hidden_size": talker_hidden,
                "intermediate_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": heads,
                "num_key_value_heads": kv_heads,
                "head_dim": 16,
                "vocab_size": 3072,
                "text_vocab_size": ids["vocab_size"],
                "text_hidden_size": 16,
                "rope_theta": 1e6,
                "num_code_groups": 16,
                "spk_id": {"vivian": 3065, "eric": 2875},
                "spk_is_dialect": {"vivian": False, "eric": "sichuan_dialect"},
                "codec_language_id": {"english": 2050, "chinese": 2055, "sichuan_dialect": 2062},
                "code_predictor_config": {
                    "hidden_size": 8,
                    "intermediate_size": 16,
                    "num_hidden_layers": 2,
                    "num_attention_heads": heads,
                    "num_key_value_heads": kv_heads,
                    "head_dim": 8,
                    "vocab_size": 2048,
                    "num_code_groups": 16,
                },
            },
        }
    )


def tiny_model(tmp_path_factory, **dims):
    """(config, model, tokenizer) with random weights, std 0.1; dims: tiny_config overrides."""
    tok_dir = tmp_path_factory.mktemp("tok")
    ids = write_tiny_tokenizer(tok_dir)
    config = tiny_config(ids, **dims)
    torch.manual_seed(0)
    model = build_model(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    return config, model, load_tokenizer(tok_dir)
