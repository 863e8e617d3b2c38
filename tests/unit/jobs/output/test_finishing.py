"""The finishing steps on synthetic clips with known silence: trimming keeps at most the pad of
silence at each end and never touches what lies between, resampling keeps the clip's length and
pitch, the steps run in their order (trim, resample, loudness), and the options off do nothing."""

from __future__ import annotations

import numpy as np
import pytest

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.spec import FinishOptions
from qtts.core.jobs.output.finishing import NORMALIZED, finish, kept_span, resample, trim_silence

RATE = 24_000
PAD_S = 0.1
# A resampler's output is the input's length times the ratio, give or take its rounding
RESAMPLED_LENGTH_SAMPLES = 2
# What reads 1 kHz in a 1 s clip: one FFT bin
PITCH_HZ = 1.0
METERS_AGREE_LU = 0.1


def tone(seconds: float, dbfs: float = -10.0, hz: float = 220.0, rate: int = RATE) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (10 ** (dbfs / 20) * np.sqrt(2) * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def zeros(seconds: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(round(seconds * rate), dtype=np.float32)


def clip_of(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts).astype(np.float32)


def ends(clip: np.ndarray, level: float = 0.0) -> tuple[int, int]:
    """Samples before the first and after the last whose magnitude is over `level`."""
    loud = np.flatnonzero(np.abs(clip) > level)
    return int(loud[0]), int(clip.size - 1 - loud[-1])


@pytest.mark.parametrize("lead_s, tail_s", [(0.6, 0.8), (1.5, 0.3), (0.25, 2.0)])
def test_leading_and_trailing_silence_are_cut_to_the_pad(lead_s, tail_s):
    speech = tone(1.0)
    out = trim_silence(clip_of(zeros(lead_s), speech, zeros(tail_s)), RATE, -40.0, PAD_S)
    lead, tail = ends(out)
    pad = round(PAD_S * RATE)
    assert lead <= pad and tail <= pad
    assert lead >= pad - round(0.005 * RATE)  # the tone's first samples are near zero
    assert out.size <= speech.size + 2 * pad


def test_noise_under_the_threshold_counts_as_silence():
    """A codec's hiss 60 dB under the speech: silence, cut like zeros."""
    rng = np.random.default_rng(0)
    lead, speech, tail = round(0.7 * RATE), tone(1.0, dbfs=-10.0), round(0.9 * RATE)
    hiss = (1e-3 * 0.1 * rng.standard_normal(lead + tail)).astype(np.float32)  # -70 dBFS
    clip = clip_of(hiss[:lead], speech, hiss[lead:])
    start, end = kept_span(clip, RATE, -40.0, PAD_S)
    pad = round(PAD_S * RATE)
    assert lead - pad <= start <= lead  # at most the pad of hiss before the tone's onset
    assert lead + speech.size <= end <= lead + speech.size + pad


def test_the_threshold_decides_what_is_silence():
    """A soft tail 30 dB under the speech is speech at -40 dB and silence at -20 dB."""
    soft = tone(0.5, dbfs=-40.0)
    clip = clip_of(zeros(0.3), tone(1.0, dbfs=-10.0), soft, zeros(0.3))
    kept = trim_silence(clip, RATE, -40.0, 0.0)
    assert kept.size >= round(1.5 * RATE) - round(0.01 * RATE)
    cut = trim_silence(clip, RATE, -20.0, 0.0)
    assert cut.size <= round(1.0 * RATE) + round(0.01 * RATE)


def test_only_the_ends_are_trimmed_and_a_short_silence_is_kept_whole():
    """A pause inside the clip stays; an end with less silence than the pad keeps all it has."""
    inner = zeros(0.8)
    clip = clip_of(zeros(0.03), tone(0.5), inner, tone(0.5), zeros(0.02))
    out = trim_silence(clip, RATE, -40.0, PAD_S)
    assert out.size == clip.size
    np.testing.assert_array_equal(out, clip)


def test_digital_silence_is_kept_whole():
    clip = zeros(1.0)
    assert trim_silence(clip, RATE, -40.0, PAD_S).size == clip.size


@pytest.mark.parametrize("target", [8_000, 16_000, 22_050, 44_100, 48_000])
def test_resampling_keeps_the_length_and_the_pitch(target):
    out = resample(tone(1.0, hz=1000.0), RATE, target)
    assert out.dtype == np.float32
    assert abs(out.size - target) <= RESAMPLED_LENGTH_SAMPLES
    spectrum = np.abs(np.fft.rfft(out))
    peak_hz = np.argmax(spectrum) * target / out.size
    assert abs(peak_hz - 1000.0) <= PITCH_HZ


def test_the_steps_run_trim_then_resample_then_loudness():
    import pyebur128

    options = FinishOptions(sample_rate=16_000, loudness_lufs=-23.0, trim_silence=True)
    clip = clip_of(zeros(0.9), tone(1.5, dbfs=-30.0), zeros(1.2))
    done = finish(clip, RATE, options)
    assert done.sample_rate == 16_000
    lead, tail = ends(done.audio, level=1e-4)  # the resampler's ringing at the edges aside
    assert lead <= round(PAD_S * 16_000) and tail <= round(PAD_S * 16_000)
    assert abs(done.audio.size - (1.5 + 2 * PAD_S) * 16_000) <= round(0.01 * 16_000)
    state = pyebur128.R128State(1, 16_000, pyebur128.MeasurementMode.MODE_I)
    state.add_frames(done.audio.astype(np.float64), done.audio.size)
    assert abs(pyebur128.get_loudness_global(state) + 23.0) <= METERS_AGREE_LU
    assert done.loudness_status == NORMALIZED
    assert done.columns() == {"num_samples": done.audio.size, "sample_rate": 16_000,
                              "loudness_lufs": done.loudness_lufs,
                              "loudness_status": NORMALIZED}  # fmt: skip


def test_the_options_off_do_nothing():
    options = FinishOptions()
    assert not options.acts and options.fingerprint_part() == {}
    clip = clip_of(zeros(0.5), tone(1.0), zeros(0.5))
    done = finish(clip, RATE, options)
    np.testing.assert_array_equal(done.audio, clip)
    assert done.columns() == {"num_samples": clip.size, "sample_rate": RATE}
    # --sample-rate at the model's own rate resamples nothing: no setting at all
    assert not FinishOptions(sample_rate=RATE).at_model_rate(RATE).acts
    assert FinishOptions(sample_rate=16_000).at_model_rate(RATE).acts


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"sample_rate": 7_999}, "--sample-rate"),
        ({"sample_rate": 96_000}, "--sample-rate"),
        ({"loudness_lufs": 3.0}, "--loudness"),
        ({"loudness_lufs": -90.0}, "--loudness"),
        ({"loudness_lufs": -23.0, "peak_db": 1.0}, "--peak-db"),
        ({"trim_silence": True, "trim_threshold_db": 0.0}, "--trim-threshold"),
        ({"trim_silence": True, "trim_pad_s": -0.1}, "--trim-pad"),
    ],
)
def test_a_bad_value_names_its_flag(kwargs, flag):
    with pytest.raises(UsageError, match=flag):
        FinishOptions(**kwargs)
