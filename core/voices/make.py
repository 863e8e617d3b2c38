"""`qtts voice make`: a reference clip (and its transcript) -> a voice file, by a Base checkpoint's
own encoders.

The clip is read as a job reads a ref_audio (qtts.core.synthesis.voice_clone.load_reference: 24 kHz
mono, the same refusals), embedded by the checkpoint's speaker encoder and, in in-context mode,
encoded by its speech tokenizer: both loaded alone (no talker, no decoder), in float32, so a voice
is the same whatever device a job later runs on. A job in float32 then makes the same codes from
the voice as from the clip given directly; a bf16 job rounds the stored embedding to bf16 where
the direct path computes it in bf16, so its codes may differ a little. The report says what was
read and written, nothing else. Knows checkpoints, clips and the voice file; no rows, no jobs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qtts.core.errors import UsageError
from qtts.core.model.config import ModelConfig
from qtts.core.model.hub import check_checkpoint_files, resolve_model_dir
from qtts.core.model.voice_file import (
    IN_CONTEXT,
    X_VECTOR,
    Voice,
    VoiceHeader,
    file_digest,
    read_header,
    write_voice,
)
from qtts.core.model.voice_identity import voice_identity

FRAMES_PER_S = 12.5  # the speech tokenizer's code frames per second of audio


def base_checkpoint(model: str, flag: str = "--model") -> tuple[Path, ModelConfig]:
    """(directory, config) of a Base checkpoint; a UsageError naming `flag` for any other."""
    model_dir = resolve_model_dir(model)
    check_checkpoint_files(model_dir)
    config = ModelConfig.from_file(model_dir / "config.json")
    if config.tts_model_type != "base":
        raise UsageError(
            f"{flag} {model} is a {config.tts_model_type} checkpoint: a voice is made with a "
            "Base checkpoint (its speaker encoder and speech tokenizer)"
        )
    return model_dir, config


def check_output(out: Path) -> None:
    """The voice file's folder must exist and the path must not be a folder (exit 2)."""
    if out.is_dir():
        raise UsageError(f"-o {out} is a folder: name the voice file, e.g. {out}/narrator.voice")
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: no folder {out.parent}")


def make_voice(
    model: str, clip: Path, transcript: str | None, out: Path, device: str = "cpu"
) -> dict[str, Any]:
    """Write the voice of `clip` to `out`: in-context mode with a transcript, else x-vector only.
    UsageError (exit 2) for a checkpoint that is no Base one or an unusable clip."""
    import torch

    from qtts.core.model.loader import parse_device
    from qtts.core.model.speaker_encoder import SAMPLE_RATE, x_vector
    from qtts.core.model.weights import load_speaker_encoder
    from qtts.core.synthesis.voice_clone import SpeechEncoder, load_reference

    check_output(out)
    model_dir, config = base_checkpoint(model)
    try:
        wav = load_reference(clip)  # [S] 24 kHz mono float32
    except ValueError as e:
        raise UsageError(str(e).replace("ref_audio", "reference clip", 1)) from None
    try:
        dev = parse_device(device)
    except ValueError as e:
        raise UsageError(str(e)) from None
    text = transcript.strip() if transcript and transcript.strip() else None
    xvec = x_vector(load_speaker_encoder(model_dir, config, dev), wav)  # [H] float32
    codes = None
    if text is not None:
        st_dir = model_dir / "speech_tokenizer"
        st_config = json.loads((st_dir / "config.json").read_text("utf-8"))
        codes = SpeechEncoder(st_dir, st_config, dev).encode(wav).cpu().numpy()  # [F, 16]
    voice = Voice(
        mode=X_VECTOR if text is None else IN_CONTEXT,
        transcript=text,
        x_vector=xvec.to(torch.float32).cpu().numpy(),
        ref_codes=codes,
        model=voice_identity(model_dir) or "",
        model_name=model,
        reference=clip.name,
        reference_seconds=wav.shape[0] / SAMPLE_RATE,
    )
    write_voice(out, voice)
    return {**describe(read_header(out)), "reference": str(clip)}


def describe(head: VoiceHeader) -> dict[str, Any]:
    """What a voice file holds (qtts voice info, and each command's report)."""
    return {
        "voice": head.path,
        "version": head.version,
        "mode": head.mode,
        "transcript": head.transcript,
        "frames": head.frames,
        "seconds": round(head.frames / FRAMES_PER_S, 2),
        "x_vector_dims": head.dims,
        "model": head.model,
        "model_name": head.model_name,
        "made_from": head.reference,
        "made_from_seconds": head.reference_seconds,
        "digest": file_digest(head.path),
    }
