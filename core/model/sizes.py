"""The published model sizes as configs, without a download: the 0.6B and 1.7B talker, code
predictor and speech-decoder dimensions (docs/model.md, "Configuration" and "Speech decoder"), plus
a "small" size for quick tests. Used by `qtts bench` (random weights of these shapes), `qtts plan`
and the meta-device checks. Token ids and speakers are placeholders: only the shapes are real.
"""

from __future__ import annotations

from qtts.core.model.codec import SpeechDecoderConfig
from qtts.core.model.config import ModelConfig

# (talker hidden, intermediate, layers, predictor hidden, decoder latent/decoder dims)
SIZES = {
    "0.6b": dict(hidden=1024, inter=3072, layers=28, heads=16, kv=8, cp=1024, cp_layers=5,
                 text=2048, text_vocab=151936, latent=1024, dec=1536, dec_layers=8),
    "1.7b": dict(hidden=2048, inter=6144, layers=28, heads=16, kv=8, cp=1024, cp_layers=5,
                 text=2048, text_vocab=151936, latent=1024, dec=1536, dec_layers=8),
    "small": dict(hidden=256, inter=768, layers=4, heads=4, kv=2, cp=128, cp_layers=2,
                  text=256, text_vocab=4096, latent=64, dec=96, dec_layers=2),
}  # fmt: skip


def model_config(size: str) -> ModelConfig:
    d = SIZES[size]
    head_dim = 128 if size in ("0.6b", "1.7b") else d["hidden"] // d["heads"]
    stack = dict(
        num_attention_heads=d["heads"],
        num_key_value_heads=d["kv"],
        head_dim=head_dim,
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        num_code_groups=16,
    )
    return ModelConfig.from_dict(
        {
            "model_type": "qwen3_tts",
            "tts_model_type": "custom_voice",
            "tts_model_size": "0b6" if size == "0.6b" else "1b7",
            "im_start_token_id": 1,
            "im_end_token_id": 2,
            "tts_pad_token_id": 3,
            "tts_bos_token_id": 4,
            "tts_eos_token_id": 5,
            "talker_config": {
                **stack,
                "hidden_size": d["hidden"],
                "intermediate_size": d["inter"],
                "num_hidden_layers": d["layers"],
                "vocab_size": 3072,
                "text_hidden_size": d["text"],
                "text_vocab_size": d["text_vocab"],
                "spk_id": {"vivian": 3065},
                "spk_is_dialect": {"vivian": False},
                "codec_language_id": {"english": 2050},
                "code_predictor_config": {
                    **stack,
                    "hidden_size": d["cp"],
                    "intermediate_size": 3 * d["cp"],
                    "num_hidden_layers": d["cp_layers"],
                    "vocab_size": 2048,
                    "head_dim": 128 if size in ("0.6b", "1.7b") else d["cp"] // d["heads"],
                },
            },
        }
    )


def decoder_dict(size: str) -> dict:
    """speech_tokenizer/config.json's "decoder_config" at `size`: the published decoder for 0.6b
    and 1.7b (they share one; attention 16 heads x 64 wide over a 512-wide stream), tiny for small.
    """
    d = SIZES[size]
    real = size in ("0.6b", "1.7b")
    return {
        "codebook_dim": 512 if real else 32,
        "latent_dim": d["latent"],
        "decoder_dim": d["dec"],
        "hidden_size": 512 if real else 32,
        "intermediate_size": 1024 if real else 64,
        "num_attention_heads": 16 if real else 2,
        "num_key_value_heads": 16 if real else 2,
        "head_dim": 64 if real else 16,
        "num_hidden_layers": d["dec_layers"],
    }


def decoder_config(size: str) -> SpeechDecoderConfig:
    return SpeechDecoderConfig.from_dict({"decoder_config": decoder_dict(size)})
