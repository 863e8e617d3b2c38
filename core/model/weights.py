"""A checkpoint's weights onto a device: the talker (+ code predictor, + speaker encoder on Base)
and the speech-tokenizer decoder, each built on the meta device and loaded strictly (every tensor
checked against the files). Knows the checkpoint layout and the modules; no generation.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from qtts.core.model.codec import SpeechDecoder, SpeechDecoderConfig
from qtts.core.model.config import ModelConfig
from qtts.core.model.loader import load_strict, read_safetensors
from qtts.core.model.talker import build_model


def load_weights(model_dir: Path, config: ModelConfig, device: torch.device, dtype: torch.dtype):
    """(model, decoder) with every tensor checked against the checkpoint, on `device` in `dtype`."""
    with torch.device("meta"):
        model = build_model(config)
    single = model_dir / "model.safetensors"
    load_strict(
        model,
        read_safetensors(model_dir),
        source=str(single if single.exists() else model_dir / "model.safetensors.index.json"),
        dtype=dtype,
        device=device,
    )
    st_dir = model_dir / "speech_tokenizer"
    st_config = json.loads((st_dir / "config.json").read_text("utf-8"))
    with torch.device("meta"):
        decoder = SpeechDecoder(SpeechDecoderConfig.from_dict(st_config))
    # The decoder follows --dtype like the talker (the official code runs it in the model's dtype
    # too): float32 is the parity path; bf16 doubles a CPU's conv rate where it has bf16 units.
    load_strict(
        decoder,
        read_safetensors(st_dir),
        source=str(st_dir / "model.safetensors"),
        dtype=dtype,
        device=device,
        prefix="decoder.",
        ignore_prefixes=("encoder.",),
    )
    return model.eval(), decoder.eval()


def load_speaker_encoder(model_dir: Path, config: ModelConfig, device: torch.device | str):
    """A Base checkpoint's speaker encoder alone, in float32: only its `speaker_encoder.*`
    tensors are read (no talker, no decoder), each checked against the file."""
    from qtts.core.model.loader import read_prefixed
    from qtts.core.model.speaker_encoder import SpeakerEncoder

    encoder = SpeakerEncoder(config.speaker_encoder)
    load_strict(
        encoder,
        read_prefixed(model_dir, "speaker_encoder."),
        source=str(model_dir / "model.safetensors"),
        dtype=torch.float32,
        device=device,
        prefix="speaker_encoder.",
    )
    return encoder.eval()
