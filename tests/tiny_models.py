"""Tiny in-memory random models + tokenizer for unit tests (no files from fixtures needed)."""

from contextlib import contextmanager

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


# A speech decoder small enough to decode minutes of frames in a test: every layer kind of the
# real one (grouped attention heads, a sliding window) at widths of 2 to 16 channels.
TINY_DECODER = {
    "codebook_size": 64, "codebook_dim": 8, "hidden_size": 8, "latent_dim": 8, "head_dim": 4,
    "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
    "num_hidden_layers": 1, "sliding_window": 6, "decoder_dim": 16,
}  # fmt: skip


def tiny_decoder(seed: int = 0):
    """A SpeechDecoder with lively random weights (the default init decodes to near silence)."""
    from qtts.core.model.codec import SpeechDecoder, SpeechDecoderConfig

    torch.manual_seed(seed)
    cfg = SpeechDecoderConfig.from_dict({"decoder_config": dict(TINY_DECODER)})
    model = SpeechDecoder(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embedding_sum"):
                p.normal_()
            elif p.dim() >= 2:
                p.normal_(std=0.6 / p[0].numel() ** 0.5)
            else:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
    return model


@contextmanager
def fast_tiny_decode():
    """ATen's own convolutions on one thread, for the tiny decoder: oneDNN runs its 1- to
    16-channel convolutions over a million samples about 20x slower (seen 6.8 s vs 0.3 s for 608
    frames), and on a busy machine OpenMP threads spin-waiting on each other make its tiny ops
    tens of times slower. For tests whose checks do not depend on either."""
    saved = torch.backends.mkldnn.enabled, torch.get_num_threads()
    torch.backends.mkldnn.enabled = False
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = saved[0]
        torch.set_num_threads(saved[1])


def as_loaded_in_bf16(model):
    """A copy of `model` as core/model/weights.py loads it in bf16: every weight bf16, the RoPE
    tables (non-persistent buffers, computed at build) still fp32."""
    import copy

    from qtts.core.model.talker import RotaryEmbedding

    model = copy.deepcopy(model).to(torch.bfloat16)
    for m in model.modules():
        if isinstance(m, RotaryEmbedding):
            m.inv_freq = m.table("cpu")
    return model
