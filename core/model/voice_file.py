"""The voice file (`qtts voice make`, `qtts voice design`): a cloned voice kept in one safetensors
file, so rows clone it without the reference clip, and every row of a dataset gets the same one.

Tensors: `x_vector` float32 [H] (the speaker embedding) and, in in-context mode only,
`ref_codes` int64 [frames, 16] (the reference clip's speech-tokenizer codes). Metadata (strings):
`format` ("qtts.voice"), `version`, `mode` (in_context | x_vector), `transcript` (in-context
only), `model` (the Base checkpoint's voice identity: qtts.core.model.voice_identity), and, for
people only, `model_name` (the --model it was made with), `reference` (the clip's file name) and
`reference_seconds`. A row's settings name a voice file by its content digest (`file_digest`).
Torch-free (numpy, safetensors' numpy API): the jobs layer reads headers while validating rows.
Knows one file format; no models, no rows.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qtts.core.model.voice_identity import read_safetensors_header

FORMAT = "qtts.voice"
VERSION = 1
IN_CONTEXT, X_VECTOR = "in_context", "x_vector"
MODES = (IN_CONTEXT, X_VECTOR)
CODE_GROUPS = 16


class VoiceFileError(ValueError):
    """A file that is no voice this qtts can read: one line naming it."""


@dataclass(frozen=True)
class Voice:
    mode: str  # IN_CONTEXT | X_VECTOR
    transcript: str | None  # the reference clip's words; None in x-vector mode
    x_vector: np.ndarray  # float32 [H]
    ref_codes: np.ndarray | None  # int64 [frames, 16]; None in x-vector mode
    model: str  # the voice identity of the Base checkpoint that made it
    model_name: str = ""  # the --model it was made with (for people)
    reference: str | None = None  # the clip's file name (for people)
    reference_seconds: float | None = None

    @property
    def frames(self) -> int:
        return 0 if self.ref_codes is None else int(self.ref_codes.shape[0])


@dataclass(frozen=True)
class VoiceHeader:
    """What a voice file says about itself, read without its tensors."""

    path: str
    version: int
    mode: str
    transcript: str | None
    model: str
    model_name: str
    reference: str | None
    reference_seconds: float | None
    frames: int  # reference code frames (0 in x-vector mode)
    dims: int  # the speaker embedding's width


def read_header(path: str | Path) -> VoiceHeader:
    """The header of a voice file; VoiceFileError (one line naming the file) when it is missing,
    no voice file, or one of a later format version."""
    path = Path(path)
    if not path.is_file():
        raise VoiceFileError(f"voice not found: {path}")
    try:
        header, _ = read_safetensors_header(path)
    except (OSError, ValueError) as e:
        raise VoiceFileError(f"voice unreadable: {path}: {_why(e)}") from None
    meta = header.get("__metadata__") or {}
    if meta.get("format") != FORMAT:
        raise VoiceFileError(f"{path} is not a qtts voice file (qtts voice make writes one)")
    version = int(meta.get("version", "0")) if str(meta.get("version", "")).isdigit() else 0
    if not 1 <= version <= VERSION:
        raise VoiceFileError(
            f"voice {path} has format version {meta.get('version')!r}; this qtts reads up to "
            f"{VERSION}: upgrade qtts or make the voice again"
        )
    mode = meta.get("mode")
    problem = _shape_problem(header, mode)
    if problem:
        raise VoiceFileError(f"voice unreadable: {path}: {problem}")
    frames = header["ref_codes"]["shape"][0] if mode == IN_CONTEXT else 0
    seconds = meta.get("reference_seconds")
    return VoiceHeader(
        path=str(path),
        version=version,
        mode=mode,
        transcript=meta.get("transcript") if mode == IN_CONTEXT else None,
        model=meta.get("model", ""),
        model_name=meta.get("model_name", ""),
        reference=meta.get("reference"),
        reference_seconds=float(seconds) if seconds else None,
        frames=int(frames),
        dims=int(header["x_vector"]["shape"][0]),
    )


def _shape_problem(header: dict, mode: str | None) -> str | None:
    if mode not in MODES:
        return f"mode {mode!r} is none of {', '.join(MODES)}"
    x = header.get("x_vector") or {}
    if x.get("dtype") != "F32" or len(x.get("shape", ())) != 1:
        return "no float32 x_vector [H]"
    if mode == X_VECTOR:
        return None
    codes = header.get("ref_codes") or {}
    if codes.get("dtype") != "I64" or list(codes.get("shape", ()))[1:] != [CODE_GROUPS]:
        return f"in-context mode without int64 ref_codes [frames, {CODE_GROUPS}]"
    if not (header.get("__metadata__") or {}).get("transcript"):
        return "in-context mode without a transcript"
    return None


def read_voice(path: str | Path) -> Voice:
    """A voice file's contents; VoiceFileError as read_header."""
    from safetensors.numpy import load_file

    head = read_header(path)
    try:
        tensors = load_file(str(path))
    except Exception as e:  # noqa: BLE001 -- safetensors raises its own kinds; one line for users
        raise VoiceFileError(f"voice unreadable: {path}: {_why(e)}") from None
    return Voice(
        mode=head.mode,
        transcript=head.transcript,
        x_vector=tensors["x_vector"],
        ref_codes=tensors.get("ref_codes") if head.mode == IN_CONTEXT else None,
        model=head.model,
        model_name=head.model_name,
        reference=head.reference,
        reference_seconds=head.reference_seconds,
    )


def write_voice(path: str | Path, voice: Voice) -> None:
    """The voice as a file at `path`, whole or not at all (a temp file renamed into place)."""
    from safetensors.numpy import save

    if voice.mode not in MODES or (voice.mode == IN_CONTEXT) != (voice.ref_codes is not None):
        raise ValueError(f"a {voice.mode} voice with ref_codes {voice.ref_codes is not None}")
    tensors = {"x_vector": np.ascontiguousarray(voice.x_vector, dtype=np.float32).reshape(-1)}
    meta = {"format": FORMAT, "version": str(VERSION), "mode": voice.mode, "model": voice.model}
    meta["model_name"] = voice.model_name
    if voice.ref_codes is not None:
        tensors["ref_codes"] = np.ascontiguousarray(voice.ref_codes, dtype=np.int64)
        meta["transcript"] = voice.transcript or ""
    if voice.reference is not None:
        meta["reference"] = voice.reference
    if voice.reference_seconds is not None:
        meta["reference_seconds"] = f"{voice.reference_seconds:.3f}"
    data = save(tensors, metadata=meta)
    path = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def file_digest(path: str | Path) -> str:
    """The content digest a row's settings name a voice file by (sha256, as reference clips')."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:32]


def refusal(head: VoiceHeader, identity: str | None, model: str) -> str | None:
    """Why `model` (whose voice identity is `identity`; None: not a Base checkpoint) cannot use
    this voice, in one line; None when it can."""
    if identity == head.model:
        return None
    made = f"the Base checkpoint {head.model_name or '?'} (identity {head.model})"
    if identity is None:
        return f"voice {head.path} was made with {made}; {model} is no Base checkpoint"
    return (
        f"voice {head.path} was made with {made}; {model} is another model (identity "
        f"{identity}): make the voice again with it"
    )


def _why(e: BaseException) -> str:
    return (getattr(e, "strerror", None) or str(e).strip() or type(e).__name__).splitlines()[0]
