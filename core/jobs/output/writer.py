"""The bytes every output store writes and what a failed write means: the WAV/FLAC and codes .npy
encodings, and disk full (DiskFullError) or an out dir that cannot be written (OutputError), both
fatal. The writes themselves are atomic (qtts.core.jobs.state.atomic_files).
Knows file formats; no naming rule (the stores own that), no tensors, models or rows.
"""

from __future__ import annotations

import errno
import io
from pathlib import Path

import numpy as np

from qtts.core.errors import FatalError

AUDIO_FORMATS = ("wav", "flac")
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class DiskFullError(OSError, FatalError):
    """No space (ENOSPC) or quota (EDQUOT) left: fatal; undone rows stay pending for a rerun."""


class OutputError(OSError, FatalError):
    """The out dir cannot be written (permissions, I/O error): fatal."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _DISK_FULL


def encode_audio(audio: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """float [-1, 1] mono -> WAV or FLAC bytes, 16-bit PCM."""
    import soundfile as sf

    if fmt not in AUDIO_FORMATS:
        raise ValueError(f"unknown audio format {fmt!r}; choose wav or flac")
    pcm = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)  # 16-bit wraps, it does not clip
    buf = io.BytesIO()
    sf.write(buf, pcm, sample_rate, subtype="PCM_16", format=fmt.upper())
    return buf.getvalue()


def encode_codes(codes: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(codes), allow_pickle=False)
    return buf.getvalue()


def write_error(e: OSError, path: Path) -> OSError:
    """A failed write as the job reports it: disk full, or the out dir cannot be written."""
    if is_disk_full(e):
        return DiskFullError(e.errno, f"disk full writing {path}: {e.strerror}")
    return OutputError(e.errno, f"cannot write {path}: {e.strerror or e}")
