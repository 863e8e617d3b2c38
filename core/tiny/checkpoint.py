"""Tiny random Qwen3-TTS checkpoints in the published layout, for tests, examples and CPU benches.

Owns the tiny dimensions (and a "small" preset), the config.json / generation_config.json /
speech_tokenizer/config.json contents with the real codec, speaker and language ids of the published
checkpoints (docs/model.md, "Configuration"), and a deterministic weight draw. Tensor names come
from the project's own modules (qtts.core.model.talker, qtts.core.model.codec), so the output loads
strictly by construction. Must not know: generation, prompts or files beyond the checkpoint layout.
The speech tokenizer holds the decoder only (qtts never encodes audio for CustomVoice/VoiceDesign);
a Base checkpoint adds the speaker encoder and the speech tokenizer's encoder (base_parts.py).
Over 300 lines: the three config files and the weight draw must agree, so they stay in one place.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save
from torch import nn

from qtts.core.model.codec import SpeechDecoder, SpeechDecoderConfig
from qtts.core.model.config import GenerationDefaults, ModelConfig
from qtts.core.model.sizes import SIZES, decoder_dict
from qtts.core.model.talker import build_model
from qtts.core.tiny import base_parts, length_eos
from qtts.core.tiny.tokenizer import write_tiny_tokenizer

# Codec ids, languages, speakers and sampling defaults of the published checkpoints.
# fmt: off
CODEC_IDS = {
    "codec_pad_id": 2148, "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_think_id": 2154,
    "codec_nothink_id": 2155, "codec_think_bos_id": 2156, "codec_think_eos_id": 2157,
}
LANGUAGES = {
    "english": 2050, "german": 2053, "spanish": 2054, "chinese": 2055, "japanese": 2058,
    "french": 2061, "korean": 2064, "russian": 2069, "italian": 2070, "portuguese": 2071,
}
DIALECTS = {"sichuan_dialect": 2062, "beijing_dialect": 2074}  # CustomVoice only
SPEAKERS = {
    "aiden": 2861, "sohee": 2864, "ono_anna": 2873, "eric": 2875, "dylan": 2878,
    "uncle_fu": 3010, "ryan": 3061, "vivian": 3065, "serena": 3066,
}
SPEAKER_DIALECT = {"eric": "sichuan_dialect", "dylan": "beijing_dialect"}
# The official sampling defaults, as generation_config.json spells them (keys from SamplingParams).
GENERATION_DEFAULTS = GenerationDefaults(max_new_tokens=8192).to_dict()
# Tiny 12 Hz decoder: real codebook size, quantizer count and upsampling (1920 samples/frame).
SPEECH_DECODER = {
    "codebook_size": 2048, "codebook_dim": 8, "hidden_size": 16, "latent_dim": 16, "head_dim": 8,
    "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 32,
    "num_hidden_layers": 2, "max_position_embeddings": 8000, "rope_theta": 10000,
    "sliding_window": 72, "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
    "layer_scale_initial_scale": 0.01, "rms_norm_eps": 1e-5, "num_quantizers": 16,
    "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2], "decoder_dim": 32,
}
# Keys every decoder stack (talker, code predictor) of the published config.json carries.
STACK_CONSTANTS = {
    "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000, "attention_bias": False,
    "use_sliding_window": False, "num_code_groups": 16, "max_position_embeddings": 32768,
}
PREPROCESSOR = {  # speech_tokenizer/preprocessor_config.json (24 kHz mono)
    "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
    "sampling_rate": 24000, "padding_side": "right", "padding_value": 0.0,
    "return_attention_mask": True, "chunk_length_s": None, "overlap": None,
}
# fmt: on
MODEL_TYPES = ("custom_voice", "voice_design", "base")
AUDIO_STD = 0.3  # target level of the tiny decoder's output
_SAVE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclasses.dataclass(frozen=True)
class TinyDims:
    """Talker and code-predictor sizes; predictor_hidden None: hidden // 2 on "1b7", else hidden."""

    hidden: int = 16
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 16  # heads * head_dim > hidden, like the real 0.6B talker
    intermediate: int = 32
    text_hidden: int = 16
    predictor_hidden: int | None = None
    predictor_layers: int = 2
    predictor_heads: int = 2
    predictor_kv_heads: int = 1
    predictor_head_dim: int = 8
    predictor_intermediate: int = 32


PRESETS = {
    "tiny": TinyDims(),
    # For CPU speed tests: a few hundred wide, 4 talker layers, the real 5 predictor layers.
    "small": TinyDims(
        hidden=256,
        layers=4,
        heads=4,
        kv_heads=2,
        head_dim=64,
        intermediate=768,
        text_hidden=256,
        predictor_layers=5,
        predictor_heads=4,
        predictor_kv_heads=2,
        predictor_head_dim=32,
        predictor_intermediate=384,
    ),
}


def _published_dims(size: str) -> TinyDims:
    """The published talker and code predictor at `size` ("0.6b" | "1.7b"): random weights of the
    real shapes, for CPU speed comparisons (only the text vocabulary stays the tiny tokenizer's)."""
    d = SIZES[size]
    return TinyDims(
        hidden=d["hidden"],
        layers=d["layers"],
        heads=d["heads"],
        kv_heads=d["kv"],
        head_dim=128,
        intermediate=d["inter"],
        text_hidden=d["text"],
        predictor_hidden=d["cp"],
        predictor_layers=d["cp_layers"],
        predictor_heads=d["heads"],
        predictor_kv_heads=d["kv"],
        predictor_head_dim=128,
        predictor_intermediate=3 * d["cp"],
    )


PRESETS.update({size: _published_dims(size) for size in ("0.6b", "1.7b")})
# The presets with the published speech decoder (the others keep the tiny one).
PRESET_DECODERS = {size: decoder_dict(size) for size in ("0.6b", "1.7b")}


def resolve_dims(size: str, base: TinyDims | None = None, **overrides: int) -> TinyDims:
    """`base` (default the tiny preset) with overrides, checked against `size` ("1b7" | "0b6")."""
    if size not in ("1b7", "0b6"):
        raise ValueError(f"size must be '1b7' or '0b6', not {size!r}")
    names = {f.name for f in dataclasses.fields(TinyDims)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"unknown dims {unknown}; known: {sorted(names)}")
    dims = dataclasses.replace(base or PRESETS["tiny"], **overrides)
    if dims.predictor_hidden is None:
        pred = dims.hidden if size == "0b6" else max(dims.hidden // 2, 2)
        dims = dataclasses.replace(dims, predictor_hidden=pred)
    if size == "0b6" and dims.predictor_hidden != dims.hidden:
        raise ValueError("size '0b6' needs predictor_hidden == hidden (no small_to_mtp_projection)")
    if size == "1b7" and dims.predictor_hidden == dims.hidden:
        raise ValueError("size '1b7' needs predictor_hidden != hidden (small_to_mtp_projection)")
    for f in dataclasses.fields(dims):
        if getattr(dims, f.name) < 1:
            raise ValueError(f"dims.{f.name} must be >= 1")
    for heads, kv, hd, what in (
        (dims.heads, dims.kv_heads, dims.head_dim, "talker"),
        (dims.predictor_heads, dims.predictor_kv_heads, dims.predictor_head_dim, "predictor"),
    ):
        if heads % kv or hd % 2:
            raise ValueError(f"{what}: heads must divide by kv_heads and head_dim must be even")
    return dims


def _mrope_section(head_dim: int) -> list[int]:
    """The real [24, 20, 20] split of head_dim / 2 = 64, scaled to this head_dim."""
    half = head_dim // 2
    side = half * 20 // 64
    return [half - 2 * side, side, side]


def _stack(d: TinyDims, prefix: str, vocab: int) -> dict[str, Any]:
    """One decoder stack's config from the TinyDims fields named `{prefix}hidden` etc."""

    def get(name: str) -> int:
        return getattr(d, prefix + name)

    return {
        "hidden_size": get("hidden"),
        "num_hidden_layers": get("layers"),
        "num_attention_heads": get("heads"),
        "num_key_value_heads": get("kv_heads"),
        "head_dim": get("head_dim"),
        "intermediate_size": get("intermediate"),
        "vocab_size": vocab,
        **STACK_CONSTANTS,
    }


def model_config(dims: TinyDims, model_type: str, size: str, ids: dict[str, int]) -> dict:
    """config.json contents; `ids` is what write_tiny_tokenizer returned."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, not {model_type!r}")
    predictor = _stack(dims, "predictor_", 2048)
    talker = _stack(dims, "", 3072)
    languages = dict(LANGUAGES)
    custom = model_type == "custom_voice"
    if custom:
        languages.update(DIALECTS)
    talker.update(
        CODEC_IDS,
        code_predictor_config=predictor,
        text_hidden_size=dims.text_hidden,
        text_vocab_size=ids["vocab_size"],
        rope_scaling={
            "interleaved": True,
            "mrope_section": _mrope_section(dims.head_dim),
            "rope_type": "default",
            "type": "default",
        },
        codec_language_id=languages,
        spk_id=dict(SPEAKERS) if custom else {},
        spk_is_dialect={s: SPEAKER_DIALECT.get(s, False) for s in SPEAKERS} if custom else {},
    )
    config = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": size,
        "tts_model_type": model_type,
        "im_start_token_id": ids["<|im_start|>"],
        "im_end_token_id": ids["<|im_end|>"],
        "tts_pad_token_id": ids["<tts_pad>"],
        "tts_bos_token_id": ids["<tts_text_bos>"],
        "tts_eos_token_id": ids["<tts_text_eod>"],
        "talker_config": talker,
    }
    if model_type == "base":  # the speaker encoder's block (core/tiny/base_parts.py)
        config["speaker_encoder_config"] = base_parts.speaker_encoder_config(dims.hidden)
    return config


def generation_config(greedy: bool = False) -> dict:
    cfg = dict(GENERATION_DEFAULTS)
    if greedy:
        cfg.update(do_sample=False, subtalker_dosample=False)
    return cfg


def speech_tokenizer_config(decoder_overrides: dict[str, Any] | None = None) -> dict:
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "decoder_config": {**SPEECH_DECODER, **(decoder_overrides or {})},
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
    }


def _fan_ins(module: nn.Module) -> dict[str, int]:
    """Weight name -> inputs summed per output value (Linear, Conv1d, ConvTranspose1d)."""
    fans = {}
    for name, m in module.named_modules():
        key = f"{name}.weight" if name else "weight"
        if isinstance(m, nn.Linear):
            fans[key] = m.in_features
        elif isinstance(m, nn.ConvTranspose1d):  # each output sees kernel / stride taps per input
            fans[key] = m.in_channels * max(m.kernel_size[0] // m.stride[0], 1)
        elif isinstance(m, nn.Conv1d):
            fans[key] = m.in_channels // m.groups * m.kernel_size[0]
    return fans


def draw_talker(model: nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Linear weights N(0, (2/sqrt(fan_in))^2) (0.5 at the tiny width), embeddings and biases
    N(0, 0.5^2), RMSNorm weights 1 + N(0, 0.1^2). Sorted names make the draw seed-stable.

    Not a flat 0.1 std (the oracle fixtures'): at hidden 16 that often lets greedy decoding settle
    on one repeated c0 after ~3 frames, the same for every row (seed 0 does), hiding row bugs.
    """
    fans = _fan_ins(model)
    out = {}
    for name, ref in sorted(model.state_dict().items()):
        noise = torch.randn(ref.shape, generator=gen)  # ref.shape, fp32
        if name.endswith("norm.weight"):
            out[name] = 1.0 + 0.1 * noise
        elif name in fans:
            out[name] = noise * (2.0 / math.sqrt(fans[name]))
        else:
            out[name] = noise * 0.5
    return out


def draw_decoder(decoder: nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Fan-in scaled draw (names without the "decoder." prefix) so the 20-conv stack keeps O(1)
    activations; calibrate_output then sets the output level."""
    fans = _fan_ins(decoder)
    out = {}
    for name, ref in sorted(decoder.state_dict().items()):
        noise = torch.randn(ref.shape, generator=gen)  # ref.shape, fp32
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "cluster_usage":
            value = 1.0 + 0.1 * noise.abs()
        elif leaf == "embedding_sum":
            value = noise
        elif name in fans:
            value = noise / math.sqrt(fans[name])
            if ".block." in name and ".conv2." in name:
                value = value * 0.3  # residual units would otherwise compound x2-3 per block
        elif leaf in ("scale", "gamma"):  # LayerScale / ConvNeXt gamma
            value = 0.3 + 0.1 * noise
        elif leaf == "weight":  # RMSNorm / LayerNorm
            value = 1.0 + 0.1 * noise
        else:  # biases, SnakeBeta alpha/beta (log scale)
            value = 0.1 * noise
        out[name] = value
    return out


@torch.no_grad()
def calibrate_output(decoder: SpeechDecoder, gen: torch.Generator) -> None:
    """Rescale the last conv so audio from random codes has mean 0 and std AUDIO_STD.

    SnakeBeta adds sin^2 >= 0 at every stage, so an uncalibrated stack ends with a large DC offset
    and over half the samples at the +-1 clamp.
    """
    final = decoder.decoder[-1].conv
    seen = []
    hook = final.register_forward_hook(lambda _m, _i, y: seen.append(y))
    q = decoder.cfg.num_quantizers
    codes = torch.randint(0, decoder.cfg.codebook_size, (1, q, 16), generator=gen)  # [B, Q, T]
    decoder(codes)
    hook.remove()
    mean, std = seen[0].mean(), seen[0].std()  # before the clamp
    gain = AUDIO_STD / float(std)
    final.weight.mul_(gain)
    final.bias.sub_(mean).mul_(gain)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _save(tensors: dict[str, torch.Tensor], path: Path, dtype: torch.dtype) -> None:
    # Bytes written with open() so the file mode follows the umask (save_file makes it 0600).
    data = save(
        {k: v.to(dtype).contiguous() for k, v in tensors.items()}, metadata={"format": "pt"}
    )
    path.write_bytes(data)


def make_tiny_checkpoint(
    out_dir: str | Path,
    *,
    model_type: str = "custom_voice",
    size: str = "1b7",
    seed: int = 0,
    greedy: bool = False,
    stop_by_text: bool = False,
    dtype: str = "float32",
    preset: str = "tiny",
    decoder_overrides: dict[str, Any] | None = None,
    **dims: int,
) -> Path:
    """Write a complete checkpoint dir (random weights, deterministic for `seed`); return it.

    `dims` override TinyDims fields (e.g. hidden=256, layers=4); preset "0.6b" or "1.7b" (with
    the matching `size`) gives the published shapes, speech decoder included; `dtype` is the
    talker weights' storage dtype (the speech tokenizer is fp32, as published); `greedy` writes a
    generation_config.json with do_sample and subtalker_dosample false; `stop_by_text` builds
    the talker so that rows end by EOS after ~1 frame per text token (core/tiny/length_eos.py).
    """
    if model_type not in MODEL_TYPES:  # before anything is written
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, not {model_type!r}")
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    if dtype not in _SAVE_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_SAVE_DTYPES)}, not {dtype!r}")
    resolved = resolve_dims(size, PRESETS[preset], **dims)
    out = Path(out_dir)
    (out / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    ids = write_tiny_tokenizer(out)
    config = model_config(resolved, model_type, size, ids)
    st_config = speech_tokenizer_config(
        {**PRESET_DECODERS.get(preset, {}), **(decoder_overrides or {})}
    )
    # Built on the CPU for names and shapes only (the draw makes the tensors): at these sizes it
    # is cheaper than the meta device, whose nn.Embedding init imports torch._dynamo (~4 s).
    model = build_model(ModelConfig.from_dict(config))
    decoder = SpeechDecoder(SpeechDecoderConfig.from_dict(st_config))
    gen = torch.Generator().manual_seed(seed)
    talker = draw_talker(model, gen)
    if model_type == "base":  # the speaker encoder's own draw (core/tiny/base_parts.py)
        talker.update(base_parts.draw_speaker_encoder(model.speaker_encoder, gen))
    if stop_by_text:
        length_eos.stop_by_text(model, talker)
    _save(talker, out / "model.safetensors", _SAVE_DTYPES[dtype])
    decoder.load_state_dict(draw_decoder(decoder, gen))
    calibrate_output(decoder, gen)
    decoder_tensors = {f"decoder.{k}": v for k, v in decoder.state_dict().items()}
    if model_type == "base":  # + the Mimi encoder: the official code encodes every reference
        st_config, encoder_tensors = base_parts.base_speech_tokenizer(st_config, gen)
        decoder_tensors.update(encoder_tensors)
    _save(decoder_tensors, out / "speech_tokenizer" / "model.safetensors", torch.float32)
    _write_json(out / "config.json", config)
    _write_json(out / "generation_config.json", generation_config(greedy))
    _write_json(out / "speech_tokenizer" / "config.json", st_config)
    _write_json(out / "speech_tokenizer" / "preprocessor_config.json", PREPROCESSOR)
    return out
