"""The model-free measures on crafted audio and codes: silence, clipping, a code loop (stuck,
cycling, sampled with slips) and speech-like input, each against what its construction implies."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qtts.core.jobs.output import recorder as measures
from qtts.core.jobs.output.recorder import (
    DBFS_FLOOR,
    LOOP_MATCH,
    LOOP_MAX_PERIOD,
    LOOP_WINDOW,
    MEASURES,
    SILENCE_FLOOR_DBFS,
    SILENCE_FRAME_S,
    measure,
    repeat_ratio,
    silence_ratio,
)
from qtts.core.jobs.state.records import RECORD_SCHEMA

RATE = 24_000
FRAME = round(SILENCE_FRAME_S * RATE)  # samples per silence frame
DB_TOL = 0.01  # dB: float32 sums of a few seconds of a sine
# A sampled sine's peak misses the crest by at most 1 - cos(pi f / rate): 2e-4 at 180 Hz.
PEAK_TOL = 1e-3
# A window may reach past a loop's edges by the comparisons it is allowed to miss, on each side.
SLACK = LOOP_WINDOW - math.ceil(LOOP_MATCH * LOOP_WINDOW)
VOCAB = 2048  # codebook-0 ids


def tone(seconds: float, amplitude: float, hz: float = 220.0) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def speechlike_codes(frames: int, seed: int = 0) -> np.ndarray:
    """codebook 0 of fluent speech: codes change nearly every frame, with the short repeats
    speech has (a held vowel over 3 frames, a 0.5 s pause holding one code)."""
    c0 = np.random.default_rng(seed).integers(0, VOCAB, frames)
    c0[10:13] = c0[10]  # a held sound
    c0[40:46] = 7  # a pause of 6 frames
    return c0


def test_the_measures_are_the_record_columns():
    out = measure(tone(1.0, 0.5), np.zeros((12, 16), np.int64), "Hi there.", RATE)
    assert tuple(out) == MEASURES and set(MEASURES) <= set(RECORD_SCHEMA.names)
    assert all(type(v) is float for v in out.values())  # JSON-able, no numpy scalars


def test_silence():
    quiet = np.zeros(RATE, np.float32)
    assert measures.peak(quiet) == 0.0 and measures.rms_dbfs(quiet) == DBFS_FLOOR
    assert silence_ratio(quiet, RATE) == 1.0
    # 1 s of speech-loud tone, 0.5 s of silence, 1 s of tone: the silent share is 0.5 / 2.5
    clip = np.concatenate([tone(1.0, 0.3), np.zeros(RATE // 2, np.float32), tone(1.0, 0.3)])
    assert silence_ratio(clip, RATE) == pytest.approx(0.5 / 2.5, abs=1 / (len(clip) // FRAME))


def test_the_silence_floor_is_the_named_level():
    # a sine's RMS is its amplitude / sqrt(2): just under and just over the floor
    at_floor = math.sqrt(2) * 10 ** (SILENCE_FLOOR_DBFS / 20)
    assert silence_ratio(tone(1.0, at_floor * 0.9), RATE) == 1.0
    assert silence_ratio(tone(1.0, at_floor * 1.1), RATE) == 0.0
    assert silence_ratio(tone(0.005, at_floor * 0.9), RATE) == 1.0  # shorter than one frame


def test_clipping_and_loudness():
    clipped = np.clip(tone(1.0, 1.5), -1.0, 1.0)
    assert measures.peak(clipped) == 1.0
    assert measures.peak(tone(1.0, 1.5)) == 1.0  # above full scale: written clipped
    half = tone(1.0, 0.5)
    assert measures.peak(half) == pytest.approx(0.5, abs=PEAK_TOL)
    want = 20 * math.log10(0.5 / math.sqrt(2))  # a sine's RMS in dB re full scale
    assert measures.rms_dbfs(half) == pytest.approx(want, abs=DB_TOL)


def _loop_bounds(length: int, frames: int) -> tuple[float, float]:
    """The repeat_ratio a loop of `length` frames among `frames` may give: its frames, and at
    most SLACK more on each side (windows tolerate that many misses)."""
    return length / frames, (length + 2 * SLACK) / frames


def test_a_stuck_code_is_a_loop():
    c0 = speechlike_codes(200)
    c0[80:120] = 5  # stuck for 40 frames (3.2 s)
    low, high = _loop_bounds(40, 200)
    assert low <= repeat_ratio(c0) <= high


def test_a_cycle_is_a_loop_with_or_without_slips():
    c0 = speechlike_codes(240)
    cycle = np.array([11, 12, 13, 14, 15])  # a syllable of 5 frames, again and again
    c0[100:160] = np.tile(cycle, 12)  # 60 frames
    low, high = _loop_bounds(60, 240)
    assert low <= repeat_ratio(c0) <= high
    sampled = c0.copy()
    sampled[[110, 135]] = 1999  # a sampled loop slips now and then: still one loop
    assert low <= repeat_ratio(sampled) <= high


def test_speechlike_codes_have_no_loop_and_a_shorter_hold_is_not_one():
    c0 = speechlike_codes(300)
    assert repeat_ratio(c0) == 0.0
    need = math.ceil(LOOP_MATCH * LOOP_WINDOW)  # equal comparisons a window needs
    c0[200 : 200 + need] = 9  # one code held over need frames: need - 1 equal comparisons
    assert repeat_ratio(c0) == 0.0
    c0[200 : 200 + need + 1] = 9  # one frame more: a loop, over those frames
    low, high = _loop_bounds(need + 1, 300)
    assert low <= repeat_ratio(c0) <= high


def test_a_cycle_longer_than_the_longest_period_is_not_seen():
    c0 = speechlike_codes(240)
    cycle = np.arange(LOOP_MAX_PERIOD + 1) + 100  # the documented limit of the measure
    c0[50:150] = np.resize(cycle, 100)
    assert repeat_ratio(c0) == 0.0


def test_too_few_frames_for_a_window():
    assert repeat_ratio(np.zeros(LOOP_WINDOW, np.int64)) == 0.0
    assert repeat_ratio(np.zeros(LOOP_WINDOW + 1, np.int64)) == 1.0
    assert repeat_ratio(np.zeros(0, np.int64)) == 0.0


def test_speechlike_input_reads_as_speech():
    # syllables: a 180 Hz voice in 4 Hz bursts, 0.3 s pauses between words
    syllables = tone(2.0, 0.4, 180.0) * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * np.arange(2 * RATE)
                                                           / RATE)).astype(np.float32)  # fmt: skip
    audio = np.concatenate([syllables, np.zeros(int(0.3 * RATE), np.float32), syllables])
    frames = len(audio) // 1920
    codes = np.stack([speechlike_codes(frames)] + [np.zeros(frames, np.int64)] * 15, axis=1)
    text = "Hello there, how are you today?"
    out = measure(audio, codes, text, RATE)
    assert out["peak"] == pytest.approx(0.4, abs=PEAK_TOL) and -25 < out["rms_dbfs"] < -10
    # the pause's edges may each put one 20 ms frame on either side of the floor
    silence_frames = len(audio) // FRAME
    assert out["silence_ratio"] == pytest.approx(0.3 / (len(audio) / RATE), abs=2 / silence_frames)
    assert out["repeat_ratio"] == 0.0
    assert out["chars_per_s"] == pytest.approx(len(text.replace(" ", "")) * RATE / len(audio))
