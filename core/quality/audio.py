"""Audio files as the scorers take them: 16 kHz mono float32 in [-1, 1], read and resampled on a
pool of threads (libsndfile and soxr release the GIL), a chunk ahead of the scorers so reading
overlaps scoring. A file that cannot be read is one line of reason, never an exception that stops
the pass. Knows files and samples; no models."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qtts.core.model.hub import one_line

SAMPLE_RATE = 16_000  # what DNSMOS and Whisper-class models take


@dataclass(frozen=True)
class Clip:
    audio: np.ndarray | None  # float32 [samples] at SAMPLE_RATE; None when unreadable
    error: str | None = None

    @property
    def seconds(self) -> float:
        return 0.0 if self.audio is None else len(self.audio) / SAMPLE_RATE


def cores() -> int:
    """The cores this process may run on (a container or taskset may allow fewer than exist)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def read_clip(path) -> Clip:
    """One file as a Clip; any failure to read it is the Clip's error. path: a file's path, or a
    callable giving a file object (an archive member's bytes)."""
    import soundfile as sf
    import soxr

    try:
        source = path() if callable(path) else str(path)
        data, rate = sf.read(source, dtype="float32", always_2d=True)
    except Exception as exc:  # noqa: BLE001 -- libsndfile's errors, a missing file, a bad header
        return Clip(None, f"unreadable audio: {one_line(exc)}")
    if data.shape[0] == 0:
        return Clip(None, "unreadable audio: the file holds no samples")
    mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE)
    if mono.size == 0:  # a few samples at a higher rate resample to none
        return Clip(None, f"unreadable audio: too short ({data.shape[0]} samples at {rate} Hz)")
    # Float files may overshoot full scale; the models were trained on audio within it.
    return Clip(np.clip(mono, -1.0, 1.0).astype(np.float32, copy=False))


def read_ahead(chunks: Sequence[Sequence[Path]], threads: int) -> Iterator[list[Clip]]:
    """Each chunk's clips, in order, the next chunk being read while the caller scores this one."""
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="qtts-read") as pool:

        def submit(k: int) -> list[Future]:
            return [pool.submit(read_clip, p) for p in chunks[k]] if k < len(chunks) else []

        pending = submit(0)
        for k in range(len(chunks)):
            current, pending = pending, submit(k + 1)
            yield [f.result() for f in current]
