"""Model configuration: dataclasses read from a checkpoint's config.json and generation_config.json.

Owns the names and defaults of the official `qwen3_tts` config (docs/model.md, "Configuration").
Knows no tensors. Unknown keys are ignored so newer checkpoints still load; missing required keys
raise ValueError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# Hard-wired in the official generate (not in any config file).
MIN_NEW_TOKENS = 2


def _pick(cls, d: dict[str, Any], **overrides: Any):
    """Build dataclass `cls` from the keys of `d` it knows, plus `overrides`."""
    names = {f.name for f in fields(cls)}
    kwargs = {k: v for k, v in d.items() if k in names}
    kwargs.update(overrides)
    return cls(**kwargs)


@dataclass(frozen=True)
class DecoderStackConfig:
    """A Qwen3 decoder stack: the talker or the code predictor."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    num_code_groups: int = 16
    max_position_embeddings: int = 32768  # positions the model was trained on

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecoderStackConfig:
        if d.get("use_sliding_window"):
            raise ValueError("config.json: sliding-window attention in the talker is not supported")
        rope = d.get("rope_theta")
        if rope is None:  # transformers 5 may nest it under rope_parameters
            rope = (d.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        head_dim = d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"]
        return _pick(cls, d, head_dim=head_dim, rope_theta=float(rope))


@dataclass(frozen=True)
class TalkerConfig(DecoderStackConfig):
    text_hidden_size: int = 2048
    text_vocab_size: int = 151936
    codec_eos_token_id: int = 2150
    codec_think_id: int = 2154
    codec_nothink_id: int = 2155
    codec_think_bos_id: int = 2156
    codec_think_eos_id: int = 2157
    codec_pad_id: int = 2148
    codec_bos_id: int = 2149
    spk_id: dict[str, int] = field(default_factory=dict)
    spk_is_dialect: dict[str, Any] = field(default_factory=dict)
    codec_language_id: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TalkerConfig:
        base = DecoderStackConfig.from_dict(d)
        extra = {f.name: getattr(base, f.name) for f in fields(DecoderStackConfig)}
        extra["spk_id"] = {k.lower(): int(v) for k, v in (d.get("spk_id") or {}).items()}
        extra["spk_is_dialect"] = {k.lower(): v for k, v in (d.get("spk_is_dialect") or {}).items()}
        extra["codec_language_id"] = {
            k.lower(): int(v) for k, v in (d.get("codec_language_id") or {}).items()
        }
        return _pick(cls, d, **extra)

    @property
    def suppress_start(self) -> int:
        """First codec id the official generate suppresses: vocab_size - 1024 (EOS excepted)."""
        return self.vocab_size - 1024


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeakerEncoderConfig:
        tuples = {k: tuple(v) for k, v in d.items() if isinstance(v, list)}
        return _pick(cls, d, **tuples)


@dataclass(frozen=True)
class ModelConfig:
    """The whole `qwen3_tts` config.json."""

    talker: TalkerConfig
    code_predictor: DecoderStackConfig
    speaker_encoder: SpeakerEncoderConfig | None
    tts_model_type: str  # "base" | "custom_voice" | "voice_design"
    tts_model_size: str  # "0b6" | "1b7"
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    tts_pad_token_id: int = 151671
    tts_bos_token_id: int = 151672
    tts_eos_token_id: int = 151673

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        if d.get("model_type", "qwen3_tts") != "qwen3_tts":
            raise ValueError(f"config.json: model_type is {d.get('model_type')!r}, not 'qwen3_tts'")
        for key in ("talker_config", "tts_model_type"):
            if key not in d:
                raise ValueError(f"config.json: missing {key!r}")
        talker_d = d["talker_config"]
        if "code_predictor_config" not in talker_d:
            raise ValueError("config.json: missing talker_config.code_predictor_config")
        model_type = d["tts_model_type"]
        if model_type not in ("base", "custom_voice", "voice_design"):
            raise ValueError(f"config.json: unknown tts_model_type {model_type!r}")
        se = d.get("speaker_encoder_config") or {}
        return _pick(
            cls,
            d,
            talker=TalkerConfig.from_dict(talker_d),
            code_predictor=DecoderStackConfig.from_dict(talker_d["code_predictor_config"]),
            speaker_encoder=SpeakerEncoderConfig.from_dict(se) if model_type == "base" else None,
            tts_model_size=str(d.get("tts_model_size") or ""),
        )

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        return cls.from_dict(_read_json(path))

    # What users may ask for (case-insensitive). Mirrors the official wrapper.
    def supported_speakers(self) -> list[str]:
        return sorted(self.talker.spk_id)

    def supported_languages(self) -> list[str]:
        names = [k for k in self.talker.codec_language_id if "dialect" not in k]
        return ["auto", *sorted(names)]

    @property
    def honours_instruct(self) -> bool:
        """0.6B CustomVoice drops instruct (the official check is `tts_model_size in "0b6"`)."""
        return not (self.tts_model_type == "custom_voice" and self.tts_model_size in "0b6")

    @property
    def uses_speaker(self) -> bool:
        return self.tts_model_type == "custom_voice"


@dataclass(frozen=True)
class SamplingParams:
    """Sampling for one site (talker or code predictor). greedy = argmax after penalties."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0

    def out_of_range(self) -> list[tuple[str, str]]:
        """(field, its valid range) for each value outside that range."""
        rules = (
            ("temperature", self.temperature > 0, "must be > 0 (use --greedy for argmax)"),
            ("top_k", self.top_k >= 0, "must be >= 0 (0 turns it off)"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("repetition_penalty", self.repetition_penalty > 0, "must be > 0 (1.0 turns it off)"),
        )
        return [(name, valid) for name, ok, valid in rules if not ok]


@dataclass(frozen=True)
class GenerationDefaults:
    """generation_config.json: a plain dict of sampling defaults (official hard defaults below)."""

    talker: SamplingParams = SamplingParams(repetition_penalty=1.05)
    subtalker: SamplingParams = SamplingParams()
    max_new_tokens: int = 2048

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GenerationDefaults:
        talker = SamplingParams(
            do_sample=bool(d.get("do_sample", True)),
            temperature=float(d.get("temperature", 0.9)),
            top_k=int(d.get("top_k", 50)),
            top_p=float(d.get("top_p", 1.0)),
            repetition_penalty=float(d.get("repetition_penalty", 1.05)),
        )
        subtalker = SamplingParams(
            do_sample=bool(d.get("subtalker_dosample", True)),
            temperature=float(d.get("subtalker_temperature", 0.9)),
            top_k=int(d.get("subtalker_top_k", 50)),
            top_p=float(d.get("subtalker_top_p", 1.0)),
        )
        return cls(talker, subtalker, int(d.get("max_new_tokens", 2048)))

    @classmethod
    def from_file(cls, path: str | Path) -> GenerationDefaults:
        return cls.from_dict(_read_json(path))


def _read_json(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(f"missing {path.name} in {path.parent}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from None
