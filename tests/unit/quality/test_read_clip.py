"""Audio files as the scorers read them: a file too short to resample fails alone, with a reason
(it once reached DNSMOS as an empty clip, which filled its window by doubling forever)."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from qtts.core.quality.audio import SAMPLE_RATE, read_clip


def test_a_file_too_short_to_resample_is_unreadable(tmp_path):
    path = tmp_path / "one.wav"
    sf.write(path, np.ones(1, np.float32) * 0.1, 48_000)
    clip = read_clip(path)
    assert clip.audio is None and clip.error.startswith("unreadable audio: too short")


def test_a_clip_is_16k_mono_within_full_scale(tmp_path):
    path = tmp_path / "stereo.wav"
    t = np.arange(24_000) / 24_000
    stereo = np.stack([np.sin(2 * np.pi * 220 * t), np.sin(2 * np.pi * 220 * t)], axis=1)
    sf.write(path, (1.2 * stereo).astype(np.float32), 24_000, subtype="FLOAT")
    clip = read_clip(path)
    assert clip.error is None and len(clip.audio) == SAMPLE_RATE  # 1 s at 16 kHz
    assert np.abs(clip.audio).max() <= 1.0
