"""--loudness's normalizer: its meter reads EBU Tech 3341's reference signals as published, a clip
reaches its target as an independent meter (libebur128, through pyebur128) reads it, the peak
ceiling holds on the samples as written (16-bit WAV and FLAC), a clip the ceiling holds back says
so, and a silent clip keeps its audio."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from qtts.core.jobs.output.finishing import (
    NORMALIZED,
    PEAK_LIMITED,
    SILENT,
    integrated_loudness,
    normalize_loudness,
)
from qtts.core.jobs.output.writer import encode_audio

# EBU Tech 3341's minimum requirement for a meter's integrated loudness on its test signals
TECH_3341_TOLERANCE_LU = 0.1
# Tech 3341's signals are stereo, the same sine in both channels; one channel of it reads
# 10 log10(2) dB lower (BS.1770 sums the channels' weighted powers).
ONE_CHANNEL_DB = 10 * np.log10(2)
# Two meters of BS.1770 on one clip: their filters and block edges differ by rounding alone
METERS_AGREE_LU = 0.1
RATES = (48_000, 24_000, 16_000)

# Tech 3341 (2016) cases 1 to 5: (dBFS of a 1 kHz sine, seconds) one after another -> LUFS
TECH_3341 = {
    "case 1": ([(-23, 20)], -23.0),
    "case 2": ([(-33, 20)], -33.0),
    "case 3": ([(-36, 10), (-23, 60), (-36, 10)], -23.0),  # the relative gate
    "case 4": ([(-72, 10), (-36, 10), (-23, 60), (-36, 10), (-72, 10)], -23.0),  # both gates
    "case 5": ([(-26, 20), (-20, 20.1), (-26, 20)], -23.0),
}


def sine(dbfs: float, seconds: float, rate: int, hz: float = 1000.0) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (10 ** (dbfs / 20) * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def speechlike(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    """A voiced buzz (150 Hz and its harmonics) and a little noise in syllable-rate bursts with
    pauses: loud and quiet blocks for the gates to sort, a speech-like crest factor."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * rate)) / rate
    envelope = np.clip(np.sin(2 * np.pi * 3.0 * t), 0, None) ** 2
    buzz = sum(np.sin(2 * np.pi * 150 * k * t) / k for k in (1, 2, 3, 5))
    return (0.1 * envelope * (buzz + 0.3 * rng.standard_normal(t.size))).astype(np.float32)


def ebur128(audio: np.ndarray, rate: int) -> float:
    """libebur128's integrated loudness of a mono clip."""
    import pyebur128

    state = pyebur128.R128State(1, rate, pyebur128.MeasurementMode.MODE_I)
    x = np.ascontiguousarray(audio, dtype=np.float64)
    state.add_frames(x, x.size)
    return pyebur128.get_loudness_global(state)


def written(audio: np.ndarray, rate: int, fmt: str) -> np.ndarray:
    """The samples a reader gets back from the 16-bit file qtts writes."""
    back, got = sf.read(io.BytesIO(encode_audio(audio, rate, fmt)), dtype="float32")
    assert got == rate
    return back


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("case", TECH_3341)
def test_the_meter_reads_tech_3341_signals_as_published(case, rate):
    parts, published = TECH_3341[case]
    clip = np.concatenate([sine(db, s, rate) for db, s in parts])
    measured = integrated_loudness(clip, rate) + ONE_CHANNEL_DB
    assert abs(measured - published) <= TECH_3341_TOLERANCE_LU


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("target", [-23.0, -18.0])
def test_a_clip_reaches_its_target_as_libebur128_reads_it(rate, target):
    done = normalize_loudness(speechlike(3.0, rate), rate, target, peak_db=-1.0)
    assert done.status == NORMALIZED
    assert abs(ebur128(done.audio, rate) - target) <= METERS_AGREE_LU
    assert abs(done.lufs - target) <= METERS_AGREE_LU  # the record's, as written


@pytest.mark.parametrize("fmt", ["wav", "flac"])
@pytest.mark.parametrize("peak_db", [-1.0, -3.0, 0.0])
def test_a_clip_the_ceiling_holds_back_says_so_and_never_crosses_it(fmt, peak_db):
    rate = 24_000
    clip = speechlike(2.0, rate) * 0.05
    clip[rate // 2] = 0.9  # a click: the gain that reaches -10 LUFS would lift it far over
    done = normalize_loudness(clip, rate, -10.0, peak_db)
    assert done.status == PEAK_LIMITED
    limit = 10 ** (peak_db / 20)
    assert np.max(np.abs(done.audio)) <= limit
    assert np.max(np.abs(written(done.audio, rate, fmt))) <= limit
    # As loud as the ceiling lets it be, and the record says how loud that is
    assert done.lufs < -10.0
    assert abs(done.lufs - ebur128(done.audio, rate)) <= METERS_AGREE_LU
    assert np.max(np.abs(done.audio)) >= limit - 2 / 32768


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_a_clip_normalized_up_to_its_peak_stays_under_the_ceiling_once_written(fmt):
    """A pure tone's loudness and peak are tied: -3 LUFS puts its peak at 0 dBFS, past -1."""
    rate = 16_000
    done = normalize_loudness(sine(-20, 2.0, rate), rate, -3.0, -1.0)
    assert done.status == PEAK_LIMITED
    assert np.max(np.abs(written(done.audio, rate, fmt))) <= 10 ** (-1 / 20)


@pytest.mark.parametrize("level", [0.0, 1e-5])  # digital silence; noise under the -70 LUFS gate
def test_a_silent_clip_keeps_its_audio_and_says_so(level):
    rate = 24_000
    clip = (level * np.random.default_rng(1).standard_normal(rate)).astype(np.float32)
    done = normalize_loudness(clip, rate, -23.0, -1.0)
    assert (done.status, done.lufs) == (SILENT, None)
    np.testing.assert_array_equal(done.audio, clip)


def test_a_clip_shorter_than_a_gating_block_is_read_as_one_block():
    """A 0.25 s tone reads as the same tone held for seconds (BS.1770 has no block to gate)."""
    rate = 24_000
    short = integrated_loudness(sine(-20, 0.25, rate), rate)
    held = integrated_loudness(sine(-20, 5.0, rate), rate)
    assert abs(short - held) <= TECH_3341_TOLERANCE_LU
    done = normalize_loudness(sine(-30, 0.25, rate), rate, -23.0, -1.0)
    assert done.status == NORMALIZED and abs(done.lufs + 23.0) <= METERS_AGREE_LU
