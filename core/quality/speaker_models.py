"""The speaker-verification models `qtts score --speaker-model` takes, each turning 16 kHz clips
into unit-length speaker embeddings whose cosine is `speaker_sim`:
- `resemblyzer` (the default): Resemblyzer's GE2E encoder, with the trained weights its wheel
  ships (qtts.core.quality.ge2e); real, offline, 256 dims;
- an x-vector checkpoint transformers' AutoModelForAudioXVector loads (WavLMForXVector, e.g.
  microsoft/wavlm-base-plus-sv; UniSpeech-SAT; wav2vec 2.0), a folder or a cached repo id;
- a Qwen3-TTS Base checkpoint: its ECAPA-TDNN speaker encoder, the one qtts clones voices with
  (qtts.core.model.speaker_encoder), read alone from the checkpoint (no talker), fed 16 kHz audio
  resampled to its 24 kHz (so nothing above 8 kHz: every scorer here reads clips at 16 kHz).
A model is named first (`choose`: kind, folder and identity, nothing loaded) and loaded when the
pass has rows for it. Knows models and samples; no tables, no dataset files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qtts.core.quality.audio import SAMPLE_RATE

RESEMBLYZER = "resemblyzer"
OPTION = "--speaker-model"


@dataclass(frozen=True)
class SpeakerModelChoice:
    kind: str  # "resemblyzer" | "xvector" | "qwen3-base"
    directory: Path | None  # the checkpoint (None for resemblyzer)
    identity: str  # what makes two embeddings comparable


def choose(spec: str) -> SpeakerModelChoice:
    """--speaker-model as a kind, a folder and an identity; ModelLoadError (one line) for a
    checkpoint that is neither an x-vector model nor a Qwen3-TTS Base checkpoint."""
    from qtts.core.model.hub import ModelLoadError
    from qtts.core.quality import checkpoints, ge2e

    if spec.strip().lower() == RESEMBLYZER:
        return SpeakerModelChoice(RESEMBLYZER, None, ge2e.identity())
    directory = checkpoints.model_dir(spec, OPTION)
    kind = _kind(directory)
    if kind is None:
        raise ModelLoadError(
            f"{OPTION} {spec}: neither an x-vector model (WavLMForXVector, ...) nor a Qwen3-TTS "
            "Base checkpoint; pass resemblyzer, one of those, or its folder"
        )
    return SpeakerModelChoice(kind, directory, f"{kind}:{checkpoints.files_identity(directory)}")


def _kind(directory: Path) -> str | None:
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if config.get("model_type") == "qwen3_tts":
        if config.get("tts_model_type") != "base":
            from qtts.core.model.hub import ModelLoadError

            raise ModelLoadError(
                f"{OPTION} {directory}: a {config.get('tts_model_type')} checkpoint has no "
                "speaker encoder; only Base checkpoints carry one"
            )
        return "qwen3-base"
    if any(str(a).endswith("ForXVector") for a in config.get("architectures") or ()):
        return "xvector"
    return None


def load(model: SpeakerModelChoice, device: str) -> Callable[[list[np.ndarray]], np.ndarray]:
    """embed(clips) -> float32 [clips, dims], unit rows; device: auto | cpu | cuda[:N]."""
    import torch

    where = device if device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
    if model.kind == RESEMBLYZER:
        from qtts.core.quality.ge2e import Ge2e

        return Ge2e(where).embed
    if model.kind == "xvector":
        return _XVector(model.directory, where).embed
    return _BaseEncoder(model.directory, where).embed


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise ValueError("the speaker model gave a zero or non-finite embedding")
    return (vectors / norms).astype(np.float32)


class _XVector:
    """transformers' AutoModelForAudioXVector, one clip per call: padding a batch would change
    what a group-normalized feature encoder sees, so a clip scores alike in any batch."""

    def __init__(self, directory: Path, device: str) -> None:
        import torch
        import transformers
        from transformers import AutoFeatureExtractor, AutoModelForAudioXVector

        from qtts.core.model.hub import ModelLoadError, one_line

        transformers.logging.set_verbosity_error()
        try:
            self.extractor = AutoFeatureExtractor.from_pretrained(directory)
            self.model = AutoModelForAudioXVector.from_pretrained(directory)
        except Exception as exc:  # noqa: BLE001 -- a bad checkpoint is one line, exit 1
            raise ModelLoadError(f"{OPTION} {directory}: {one_line(exc)}") from None
        self.device = torch.device(device)
        self.model.to(self.device).eval()

    def embed(self, clips: list[np.ndarray]) -> np.ndarray:
        import torch

        out = []
        with torch.inference_mode():
            for audio in clips:
                inputs = self.extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt")
                inputs = {k: v.to(self.device) for k, v in inputs.items()}
                out.append(self.model(**inputs).embeddings[0].float().cpu().numpy())
        return _unit(np.stack(out))


class _BaseEncoder:
    """A Base checkpoint's ECAPA-TDNN: only its `speaker_encoder.*` tensors are read."""

    def __init__(self, directory: Path, device: str) -> None:
        from qtts.core.model.config import ModelConfig
        from qtts.core.model.weights import load_speaker_encoder

        config = ModelConfig.from_file(directory / "config.json")
        self.encoder = load_speaker_encoder(directory, config, device)

    def embed(self, clips: list[np.ndarray]) -> np.ndarray:
        import soxr

        from qtts.core.model.speaker_encoder import SAMPLE_RATE as RATE
        from qtts.core.model.speaker_encoder import x_vector

        out = []
        for audio in clips:
            wav = soxr.resample(audio, SAMPLE_RATE, RATE, quality="HQ").astype(np.float32)
            out.append(x_vector(self.encoder, wav).float().cpu().numpy())
        return _unit(np.stack(out))
