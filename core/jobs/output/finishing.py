"""A row's clip between the speech decoder and its encoding: trimmed, resampled with soxr and
brought to its loudness under the peak ceiling, in that order (README, "Audio for training").
Loudness is pyloudnorm's BS.1770-4 with its "DeMan" K-weighting filters, derived for any rate
(libebur128 reads the same clips alike). Knows numpy arrays; no files, no records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from qtts.core.jobs.contract.spec import FinishOptions

# Silence is found on 10 ms frames: shorter than a plosive's closure, long enough that a frame's
# energy is not one cycle of a low voice.
TRIM_FRAME_S = 0.01
# soxr's HQ: 20-bit precision, finer than the 16-bit PCM written.
RESAMPLE_QUALITY = "HQ"


@dataclass(frozen=True)
class Finished:
    """A clip as it is written, and what its loudness step found (None: no such step)."""

    audio: np.ndarray  # float32 [samples]
    sample_rate: int
    loudness_lufs: float | None = None
    loudness_status: str | None = None  # loudness.NORMALIZED | PEAK_LIMITED | SILENT

    def columns(self) -> dict[str, Any]:
        """The record's fields this clip sets: its length and rate, and its loudness if
        normalized (left out otherwise: a record without them reads null)."""
        out: dict[str, Any] = {"num_samples": int(len(self.audio)), "sample_rate": self.sample_rate}
        if self.loudness_status is not None:
            out |= {"loudness_lufs": self.loudness_lufs, "loudness_status": self.loudness_status}
        return out


def finish(audio: np.ndarray, sample_rate: int, options: FinishOptions) -> Finished:
    """audio float32 [samples] at sample_rate -> the clip the options make of it."""
    audio = np.asarray(audio, dtype=np.float32)
    if options.trim_silence:
        audio = trim_silence(audio, sample_rate, options.trim_threshold_db, options.trim_pad_s)
    if options.sample_rate is not None and options.sample_rate != sample_rate:
        audio = resample(audio, sample_rate, options.sample_rate)
        sample_rate = options.sample_rate
    if options.loudness_lufs is None:
        return Finished(audio, sample_rate)
    done = normalize_loudness(audio, sample_rate, options.loudness_lufs, options.peak_db)
    return Finished(done.audio, sample_rate, done.lufs, done.status)


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """audio float32 [samples] at rate -> [about samples x target / rate] at target."""
    import soxr

    out = soxr.resample(audio, rate, target, quality=RESAMPLE_QUALITY)
    return np.asarray(out, dtype=np.float32)


def trim_silence(audio: np.ndarray, rate: int, threshold_db: float, pad_s: float) -> np.ndarray:
    """audio float32 [samples] less its leading and trailing silence, pad_s of it kept at each end
    (less where the clip has less): the slice kept_span names."""
    x = np.asarray(audio, dtype=np.float32)
    start, end = kept_span(x, rate, threshold_db, pad_s)
    return x[start:end]


def kept_span(x: np.ndarray, rate: int, threshold_db: float, pad_s: float) -> tuple[int, int]:
    """[start, end) of the samples trimming keeps: from the first sample reaching the level of the
    first TRIM_FRAME_S frame not silent to the last's, pad_s more on each side. A clip of digital
    silence is kept whole: there is no speech to find its ends by."""
    if x.size == 0:
        return 0, 0
    width = max(1, round(TRIM_FRAME_S * rate))
    frames = -(-x.size // width)
    blocks = np.zeros(frames * width, dtype=np.float32)
    blocks[: x.size] = x
    blocks = blocks.reshape(frames, width)  # [frames, width], the last zero-padded
    power = np.einsum("ij,ij->i", blocks, blocks, dtype=np.float64) / width  # [frames]
    top = float(power.max())
    if top <= 0.0:
        return 0, x.size
    floor = top * 10.0 ** (threshold_db / 10.0)  # the threshold as a mean square
    loud = np.flatnonzero(power >= floor)
    level = float(np.sqrt(floor))
    first, last = int(loud[0]) * width, int(loud[-1]) * width
    start = first + _first_reaching(x[first : first + width], level)
    tail = x[last : last + width]
    end = last + len(tail) - _first_reaching(tail[::-1], level)
    pad = round(pad_s * rate)
    return max(0, start - pad), min(x.size, end + pad)


def _first_reaching(frame: np.ndarray, level: float) -> int:
    """The index of the frame's first sample whose magnitude reaches level (0 if none does: a
    frame at the level by rounding alone)."""
    hits = np.flatnonzero(np.abs(frame) >= level)
    return int(hits[0]) if hits.size else 0


NORMALIZED, PEAK_LIMITED, SILENT = "normalized", "peak_limited", "silent"
GATE_BLOCK_S = 0.4  # BS.1770's gating block
# One step of 16-bit PCM as a reader sees it (1/32768): the ceiling is lowered by one, so the
# rounding of the encoder (a half step at most) never lifts a sample over it.
PCM_STEP = 1.0 / 32768


@dataclass(frozen=True)
class Normalized:
    audio: np.ndarray  # float32 [samples]
    lufs: float | None  # its integrated loudness as written; None: silent (the meter reads -inf)
    status: str  # NORMALIZED | PEAK_LIMITED | SILENT


def integrated_loudness(audio: np.ndarray, rate: int) -> float:
    """The clip's integrated loudness in LUFS (BS.1770-4, gated); -inf for silence."""
    import pyloudnorm

    x = np.asarray(audio, dtype=np.float64)
    if x.size == 0:
        return float("-inf")
    # A clip under one block is one block of its length (a hair short: the meter refuses a
    # block longer than the clip, and seconds times rate may round over it).
    block = min(GATE_BLOCK_S, (x.size - 0.5) / rate)
    meter = pyloudnorm.Meter(rate, filter_class="DeMan", block_size=block)
    with np.errstate(divide="ignore"):  # log10(0) of a silent clip: -inf, as documented
        return float(meter.integrated_loudness(x))


def ceiling(peak_db: float) -> float:
    """The highest sample value allowed before encoding, for a ceiling of peak_db dBFS."""
    return 10.0 ** (peak_db / 20.0) - PCM_STEP


def normalize_loudness(
    audio: np.ndarray, rate: int, target_lufs: float, peak_db: float
) -> Normalized:
    """audio float32 [samples] at `rate` -> the clip at target_lufs, never over peak_db."""
    x = np.asarray(audio, dtype=np.float32)
    measured = integrated_loudness(x, rate)
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if np.isfinite(measured):
        gain, status = 10.0 ** ((target_lufs - measured) / 20.0), NORMALIZED
    else:
        gain, status = 1.0, SILENT
    top = ceiling(peak_db)
    if peak * gain > top:
        gain = top / peak
        status = PEAK_LIMITED if status == NORMALIZED else status
    y = (x * np.float32(gain)).astype(np.float32, copy=False) if gain != 1.0 else x
    written = integrated_loudness(y, rate) if status != SILENT else float("-inf")
    return Normalized(y, written if np.isfinite(written) else None, status)
