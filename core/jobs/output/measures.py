"""Model-free measures of a finished row, from the audio and codes the job already holds.

Five numbers per ok row, cheap enough to compute for every row on the writer threads
(qtts.core.jobs.output.recorder), never on the device's critical path, and recorded beside the row
in results.parquet: the loudest sample (`peak`: 1.0 means clipped), the loudness (`rms_dbfs`), how
much of the clip is quiet (`silence_ratio`), how much of it loops (`repeat_ratio`: a babbling
runaway repeats its codes) and how fast its text is spoken (`chars_per_s`: speech far too fast
or too slow for its text is the other common failure). A split row is measured over its joined
audio (pauses included) and its codes one segment after another.
Knows numpy arrays and a text; no files, no models, no tensors.
"""

from __future__ import annotations

import numpy as np

MEASURES = ("peak", "rms_dbfs", "silence_ratio", "repeat_ratio", "chars_per_s")

# rms_dbfs of digital silence: finite (a journal line is JSON, which has no -inf) and below the
# quietest non-zero 16-bit signal (-96 dBFS), so it reads as "nothing there".
DBFS_FLOOR = -120.0
# Silence is judged on short frames, 20 ms: shorter than a syllable, so the pauses between words
# count, long enough that one frame's energy is not one cycle of a low voice.
SILENCE_FRAME_S = 0.02
# A frame quieter than this (its RMS, re full scale) is silent: speech sits around -20 to -35
# dBFS, its quietest consonants about 20 dB lower; a codec's hiss in a pause is below -50.
SILENCE_FLOOR_DBFS = -50.0
# Loops, on codebook 0 (12.5 frames per second): a stretch of LOOP_WINDOW frames' comparisons,
# each code against the code `p` frames earlier (p in 1..LOOP_MAX_PERIOD), with at least
# LOOP_MATCH of them equal, is a loop; every frame such a stretch spans (LOOP_WINDOW + p of them)
# lies inside one. 2 s: fluent speech never holds one code, syllable or word that long; a pause
# does hold one code, and a pause over 2 s counts (a stuck silence is a failure of its own).
LOOP_WINDOW = 25
# 8 frames (0.64 s, about a word): every loop is then seen for at least four cycles in a window.
LOOP_MAX_PERIOD = 8
# A sampled loop is not exact: 23 of 25 comparisons equal is still one.
LOOP_MATCH = 0.9


def measure(audio: np.ndarray, codes: np.ndarray, text: str, sample_rate: int) -> dict[str, float]:
    """audio float32 [samples] in [-1, 1]; codes int [frames, groups] -> MEASURES by name."""
    audio = np.asarray(audio, dtype=np.float32)
    duration = len(audio) / sample_rate
    return {
        "peak": peak(audio),
        "rms_dbfs": rms_dbfs(audio),
        "silence_ratio": silence_ratio(audio, sample_rate),
        "repeat_ratio": repeat_ratio(np.asarray(codes)[:, 0] if len(codes) else np.zeros(0)),
        "chars_per_s": chars_per_s(text, duration),
    }


def peak(audio: np.ndarray) -> float:
    """max |sample| of the audio as written (files clip to [-1, 1]): 1.0 means it clipped."""
    if audio.size == 0:
        return 0.0
    return min(max(float(audio.max()), -float(audio.min())), 1.0)


def rms_dbfs(audio: np.ndarray) -> float:
    """The whole clip's RMS in dB re full scale (a full-scale sine: -3.01), at least DBFS_FLOOR."""
    power = float(np.dot(audio, audio)) / audio.size if audio.size else 0.0
    return _dbfs(power)


def silence_ratio(audio: np.ndarray, sample_rate: int) -> float:
    """The share of SILENCE_FRAME_S frames whose RMS is below SILENCE_FLOOR_DBFS (a trailing
    partial frame is left out, unless the clip is shorter than one frame)."""
    if audio.size == 0:
        return 0.0
    width = min(max(round(SILENCE_FRAME_S * sample_rate), 1), audio.size)
    frames = audio.size // width
    blocks = audio[: frames * width].reshape(frames, width)  # [frames, width]
    power = np.einsum("ij,ij->i", blocks, blocks) / width  # [frames] mean squares
    floor = 10.0 ** (SILENCE_FLOOR_DBFS / 10.0)  # the floor as mean square
    return float(np.count_nonzero(power < floor)) / frames


def repeat_ratio(c0: np.ndarray) -> float:
    """The share of codebook-0 frames inside a loop: for some period p in 1..LOOP_MAX_PERIOD,
    a window of LOOP_WINDOW consecutive comparisons c0[t] == c0[t - p] has at least
    ceil(LOOP_MATCH x LOOP_WINDOW) equal, and the frame lies in the span those comparisons
    read (from the first one's earlier frame to the last one's later frame)."""
    c0 = np.asarray(c0)
    n = c0.size
    need = int(np.ceil(LOOP_MATCH * LOOP_WINDOW))
    edges = np.zeros(n + 1, dtype=np.int64)  # +1 where a loop span starts, -1 past its end
    for p in range(1, LOOP_MAX_PERIOD + 1):
        if n < p + LOOP_WINDOW:
            break
        same = np.concatenate(([0], np.cumsum(c0[p:] == c0[:-p])))  # same[j]: equal among 0..j-1
        equal = same[LOOP_WINDOW:] - same[:-LOOP_WINDOW]  # window j: comparisons j..j+W-1
        starts = np.flatnonzero(equal >= need)  # comparison j reads frames j and j + p
        edges[starts] += 1  # starts are distinct: no two updates land on one index
        edges[starts + LOOP_WINDOW + p] -= 1
    if n == 0:
        return 0.0
    inside = np.cumsum(edges[:n]) > 0
    return float(np.count_nonzero(inside)) / n


def chars_per_s(text: str | None, duration_s: float) -> float:
    """Characters of the text other than whitespace, per second of audio (0 for no audio)."""
    if not text or duration_s <= 0:
        return 0.0
    return sum(map(len, text.split())) / duration_s  # split(): at any Unicode whitespace


def _dbfs(power: float) -> float:
    """A mean square as dB re full scale, at least DBFS_FLOOR."""
    floor = 10.0 ** (DBFS_FLOOR / 10.0)
    return 10.0 * float(np.log10(max(power, floor)))
