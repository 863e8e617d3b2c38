"""Model configuration: dataclasses read from a checkpoint's config.json and generation_config.json.

Owns the names and defaults of the official `qwen3_tts` config (docs/model.md, "Configuration").
Knows no tensors. Unknown keys are ignored so newer checkpoints still load; missing required keys
raise ValueError.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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


def sampling_field(
    default: float | int | bool,
    *,
    keys: tuple[str, str | None],
    help: str = "",
    valid: tuple[Callable[[Any], bool], str] | None = None,
    drawing: bool = False,
    talker_default: float | int | bool | None = None,
) -> Any:
    """A SamplingParams field and everything said about it, in one place: its generation_config.json
    key at each site (talker, code predictor; None: the site does not have it), the command-line
    help (the flags are made from the field: core/jobs/execution/generation.py, cli/options.py),
    its valid range (a check and what to say), whether it only shapes a random draw (the argmax
    ignores it), and the talker's official hard default where it differs from the field's."""
    meta = {"keys": keys, "help": help, "valid": valid, "drawing": drawing}
    meta["defaults"] = (default if talker_default is None else talker_default, default)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class SamplingParams:
    """Sampling for one site (talker or code predictor). greedy = argmax after penalties.

    A field here is the whole of a sampling parameter outside the kernels: the checkpoint's keys,
    the command-line flags, the merge, the range check and the fingerprint all come from it (its
    values reach the sampler through RowParams, core/engine/step/token_choice.py)."""

    do_sample: bool = sampling_field(True, keys=("do_sample", "subtalker_dosample"))
    temperature: float = sampling_field(
        0.9,
        keys=("temperature", "subtalker_temperature"),
        help="temperature (> 0)",
        valid=(lambda v: v > 0, "must be > 0 (use --greedy for argmax)"),
        drawing=True,
    )
    top_k: int = sampling_field(
        50,
        keys=("top_k", "subtalker_top_k"),
        help="top-k (0: off)",
        valid=(lambda v: v >= 0, "must be >= 0 (0 turns it off)"),
        drawing=True,
    )
    top_p: float = sampling_field(
        1.0,
        keys=("top_p", "subtalker_top_p"),
        help="top-p, in (0, 1]",
        valid=(lambda v: 0 < v <= 1, "must be in (0, 1]"),
        drawing=True,
    )
    # The official code applies the repetition penalty at the talker only.
    repetition_penalty: float = sampling_field(
        1.0,
        keys=("repetition_penalty", None),
        help="repetition penalty (1.0: off)",
        valid=(lambda v: v > 0, "must be > 0 (1.0 turns it off)"),
        talker_default=1.05,
    )

    def out_of_range(self) -> list[tuple[str, str]]:
        """(field, its valid range) for each value outside that range."""
        return [
            (f.name, f.metadata["valid"][1])
            for f in fields(self)
            if f.metadata["valid"] and not f.metadata["valid"][0](getattr(self, f.name))
        ]

    @classmethod
    def from_config(cls, d: dict[str, Any], site: int) -> SamplingParams:
        """One site's values from generation_config.json (site 0: talker, 1: code predictor); a
        key left out (or one the site does not have) takes the official hard default."""
        values = {}
        for f in fields(cls):
            default = f.metadata["defaults"][site]
            key = f.metadata["keys"][site]
            values[f.name] = type(default)(d.get(key, default) if key else default)
        return cls(**values)


@dataclass(frozen=True)
class GenerationDefaults:
    """generation_config.json: a plain dict of sampling defaults (official hard defaults below)."""

    talker: SamplingParams = SamplingParams(repetition_penalty=1.05)
    subtalker: SamplingParams = SamplingParams()
    max_new_tokens: int = 2048

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GenerationDefaults:
        return cls(
            SamplingParams.from_config(d, 0),
            SamplingParams.from_config(d, 1),
            int(d.get("max_new_tokens", 2048)),
        )

    @classmethod
    def from_file(cls, path: str | Path) -> GenerationDefaults:
        return cls.from_dict(_read_json(path))

    def to_dict(self) -> dict[str, Any]:
        """generation_config.json's keys for these values (from_dict's inverse), talker first."""
        out = {}
        for site, params in enumerate((self.talker, self.subtalker)):
            for f in fields(params):
                if f.metadata["keys"][site]:
                    out[f.metadata["keys"][site]] = getattr(params, f.name)
        return {**out, "max_new_tokens": self.max_new_tokens}


def _read_json(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(f"missing {path.name} in {path.parent}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from None
