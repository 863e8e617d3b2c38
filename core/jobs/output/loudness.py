"""A clip normalized to an integrated loudness under a sample-peak ceiling (--loudness, --peak-db).

The meter is pyloudnorm's ITU-R BS.1770-4 (K-weighted, 400 ms blocks gated at -70 LUFS and
10 LU under their mean), with the K-weighting filters it derives for any rate from BS.1770's
48 kHz coefficients ("DeMan": libebur128 reads the same clips alike). A clip shorter than one
block is read as one block of its own length (BS.1770 has no block to gate there).

The gain that brings the clip to the target is capped so the loudest sample stays under the
ceiling once written as 16-bit PCM (WAV or FLAC): a clip that the cap holds back is as loud as
the ceiling allows and says so (PEAK_LIMITED); a clip the meter reads as silent (-inf: no block
above the absolute gate) keeps its audio (SILENT). Its loudness is then read again, as written.
Knows numpy arrays; no files, no records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
