"""Voice clone references (Base models): reference audio -> x-vector and (ICL) Mimi codes.

Owns reading a reference clip (soundfile; any format it reads) as 24 kHz mono float32 (soxr, as
librosa's default resampler), the checks that fail a row with a reason (missing, unreadable,
silent, shorter than 1 s), the speech-tokenizer encoder (transformers' MimiModel built from
speech_tokenizer/config.json `encoder_config` with the `encoder.*` weights; first 16 codebooks),
and a per-job cache: each unique (ref_audio, ref_text, x_vector_only) is computed once, and each
voice file (qtts.core.model.voice_file) read once: its x-vector and codes stand in for the clip's.
Knows files, waveforms and tensors; no prompts layout, no generation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qtts.core.model.hub import ModelLoadError
from qtts.core.model.loader import load_strict, read_safetensors
from qtts.core.model.speaker_encoder import SAMPLE_RATE, SpeakerEncoder, x_vector

log = logging.getLogger("qtts")
MIN_SECONDS = 1.0
SILENCE_PEAK = 1e-4  # -80 dBFS: nothing to clone


def load_reference(path: str | Path) -> np.ndarray:
    """A reference clip as 24 kHz mono float32 [S]; ValueError saying what is wrong with it."""
    import soundfile as sf

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"ref_audio not found: {path}")
    try:
        wav, sr = sf.read(str(path), dtype="float32", always_2d=True)  # [S, C]
    except Exception as e:  # soundfile raises LibsndfileError, RuntimeError, TypeError...
        reason = str(e).strip() or type(e).__name__
        raise ValueError(f"ref_audio unreadable: {path}: {reason}") from None
    wav = wav.mean(axis=1, dtype=np.float32) if wav.shape[1] > 1 else wav[:, 0]
    if sr != SAMPLE_RATE:
        wav = resample(wav, int(sr))
    if wav.shape[0] < MIN_SECONDS * SAMPLE_RATE:
        seconds = wav.shape[0] / SAMPLE_RATE
        raise ValueError(f"ref_audio too short: {path} is {seconds:.2f} s; need at least 1 s")
    if not np.isfinite(wav).all():
        raise ValueError(f"ref_audio unreadable: {path} holds NaN or infinite samples")
    if float(np.abs(wav).max()) <= SILENCE_PEAK:
        raise ValueError(f"ref_audio is silent: {path} (peak below -80 dBFS)")
    return np.ascontiguousarray(wav, dtype=np.float32)


def resample(wav: np.ndarray, sr: int) -> np.ndarray:
    """To 24 kHz with soxr 'HQ', length ceil(n * ratio) (librosa.resample's defaults)."""
    import soxr

    out = soxr.resample(wav, sr, SAMPLE_RATE, quality="HQ").astype(np.float32)
    n = math.ceil(wav.shape[0] * SAMPLE_RATE / sr)
    return out[:n] if out.shape[0] >= n else np.pad(out, (0, n - out.shape[0]))


class SpeechEncoder:
    """The speech tokenizer's Mimi encoder: 24 kHz waveform -> codes [frames, 16]."""

    def __init__(self, st_dir: Path, st_config: dict[str, Any], device: torch.device):
        from transformers import MimiConfig, MimiModel

        enc = dict(st_config.get("encoder_config") or {})
        if not enc:
            raise ModelLoadError(f"{st_dir}/config.json has no encoder_config (needed for ICL)")
        # The official loader widens Mimi's 250-frame sliding window to the full context.
        enc["sliding_window"] = enc.get("max_position_embeddings", 8000)
        self.num_quantizers = int(st_config.get("encoder_valid_num_quantizers", 16))
        self.downsample = int(st_config.get("encode_downsample_rate", 1920))
        model = MimiModel(MimiConfig(**enc))
        # Only the encoder half is stored; transformers >= 5.2x nests it under `encoder`.
        model._modules["decoder"] = None
        for name in ("decoder_transformer", "upsample"):
            if name in model._modules:
                model._modules[name] = None
        tensors = _rename_mimi(read_safetensors(st_dir), set(model.state_dict()))
        load_strict(
            model,
            tensors,
            source=str(st_dir / "model.safetensors"),
            dtype=torch.float32,
            device=device,
        )
        self.model, self.device = model.eval(), device

    @torch.inference_mode()
    def encode(self, wav: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(wav).to(self.device)[None, None]  # [1, 1, S]
        codes = self.model.encode(x, num_quantizers=self.num_quantizers).audio_codes  # [1, Q, T]
        frames = -(-wav.shape[0] // self.downsample)  # the official keeps ceil(S / 1920)
        return codes[0, : self.num_quantizers, :frames].transpose(0, 1).long()  # [T, 16]


def _rename_mimi(tensors: dict[str, torch.Tensor], names: set[str]) -> dict[str, torch.Tensor]:
    """Checkpoint `encoder.*` tensors under the module names of the installed transformers."""
    out = {}
    for key, t in tensors.items():
        if not key.startswith("encoder."):
            continue
        key = key.removeprefix("encoder.")
        if key not in names:  # newer layout: encoder.{encoder_seanet,encoder_transformer,...}
            head, _, rest = key.partition(".")
            seanet = {"encoder": "encoder_seanet"}.get(head, head)
            key = f"encoder.{seanet}.{rest}" if head != "quantizer" else key
        out[key] = t
    return out


@dataclass(frozen=True)
class CloneReference:
    """What one unique reference contributes to a prompt."""

    x_vector: torch.Tensor  # [H] in the talker's dtype
    ref_code: torch.Tensor | None  # int64 [frames, 16]; None in x-vector-only mode
    ref_text: str | None  # None in x-vector-only mode


class ReferenceCache:
    """Computes each unique (ref_audio, ref_text, x_vector_only) once per job, and reads each
    (voice file, x_vector_only) once; failures too."""

    def __init__(
        self, speaker_encoder: SpeakerEncoder, speech_encoder: Callable[[], SpeechEncoder]
    ):
        self.speaker_encoder = speaker_encoder
        self._load_speech_encoder = speech_encoder  # built on first ICL use (x-vector jobs skip it)
        self._speech_encoder: SpeechEncoder | None = None
        self._done: dict[tuple, CloneReference | str] = {}
        self._audio: dict[str, np.ndarray | str] = {}
        self.computed = 0  # references built (for tests and logs)

    def get(
        self, ref_audio: str | None, ref_text: str | None, voice: str | None = None
    ) -> CloneReference:
        """ICL when ref_text is non-blank, else x-vector only; from the voice file `voice` when
        given (ref_text: its transcript, or None for its x-vector alone). Raises
        ValueError(reason)."""
        if not ref_audio and not voice:
            raise ValueError("missing ref_audio: Base models clone a voice from reference audio")
        text = ref_text if ref_text and ref_text.strip() else None
        key = ("voice", voice, text is None) if voice else (ref_audio, text, text is None)
        if key not in self._done:
            try:
                if voice:
                    self._done[key] = self._from_voice(voice, x_vector_only=text is None)
                else:
                    self._done[key] = self._build(ref_audio, text)
            except ValueError as e:
                self._done[key] = str(e)
        got = self._done[key]
        if isinstance(got, str):
            raise ValueError(got)
        return got

    def _build(self, ref_audio: str, text: str | None) -> CloneReference:
        wav = self._wav(ref_audio)
        xvec = x_vector(self.speaker_encoder, wav)
        code = None
        if text is not None:
            if self._speech_encoder is None:
                self._speech_encoder = self._load_speech_encoder()
            code = self._speech_encoder.encode(wav)
        self.computed += 1
        return CloneReference(xvec, code, text)

    def _from_voice(self, path: str, x_vector_only: bool) -> CloneReference:
        """A voice file's reference, as _build would have made it from the clip (the row's
        validation checked that the voice belongs to this model)."""
        from qtts.core.model.voice_file import read_voice

        voice = read_voice(path)  # VoiceFileError is a ValueError: the row fails with it
        p = next(self.speaker_encoder.parameters())
        if voice.x_vector.shape[0] != self.speaker_encoder.fc.out_channels:
            raise ValueError(
                f"voice {path} holds a {voice.x_vector.shape[0]}-wide speaker embedding; this "
                f"model's is {self.speaker_encoder.fc.out_channels} wide"
            )
        xvec = torch.from_numpy(voice.x_vector).to(device=p.device, dtype=p.dtype)  # [H]
        if x_vector_only or voice.ref_codes is None:
            return CloneReference(xvec, None, None)
        return CloneReference(xvec, torch.from_numpy(voice.ref_codes).long(), voice.transcript)

    def _wav(self, path: str) -> np.ndarray:
        if path not in self._audio:  # one read per file even when ICL and x-vector rows share it
            try:
                self._audio[path] = load_reference(path)
            except ValueError as e:
                self._audio[path] = str(e)
        got = self._audio[path]
        if isinstance(got, str):
            raise ValueError(got)
        return got


def clone_inputs(cache: ReferenceCache, tokenizer, requests: list, tokens: list):
    """(requests, tokens, failures): each Base row's tokens with its reference resolved; a row
    whose reference is unusable becomes a RowFailure with the reason."""
    from dataclasses import replace

    from qtts.core.synthesis.prompt import clone_tokens
    from qtts.core.synthesis.requests import RowFailure

    kept, kept_tokens, failed = [], [], []
    for r, t in zip(requests, tokens, strict=True):
        try:
            ref = cache.get(r.ref_audio, r.ref_text, r.voice)
        except ValueError as e:
            failed.append(RowFailure(r.id, str(e)))
            continue
        frames = 0 if ref.ref_code is None else int(ref.ref_code.shape[0])
        t = clone_tokens(t, tokenizer, ref.ref_text, frames)
        kept.append(r)
        kept_tokens.append(replace(t, ref_audio=r.ref_audio, ref_text=r.ref_text, voice=r.voice))
    return kept, kept_tokens, failed


def cut_reference(wav: np.ndarray, ref_frames: int, total_frames: int) -> np.ndarray:
    """Drop the reference part of audio decoded from ref_code ++ generated codes, at the official
    int(ref / total * samples). Matched for parity; float rounding can put the cut a sample before
    ref_frames * 1920 (docs/model.md, "Pitfalls"), so the output may carry one reference sample."""
    return wav[int(ref_frames / max(total_frames, 1) * wav.shape[0]) :]
