"""DNSMOS P.835 as qtts scores it: many segments per onnxruntime call, yet the same numbers as
speechmos's own one-segment-at-a-time code; and real speech scores clearly above noise."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import soxr
from speech import SENTENCES, speak, write_noise

from qtts.core.quality.audio import SAMPLE_RATE, read_clip
from qtts.core.quality.dnsmos import Dnsmos

SAME = 1e-5  # batched vs one at a time: onnxruntime may sum in another order
SPEECH_OVRL_MIN = 2.3  # espeak-ng's clean speech scores about 2.8 overall (1 to 5)
NOISE_OVRL_MAX = 1.5  # white noise about 1.1
MARGIN = 1.0  # speech above noise by at least this much


@pytest.fixture(scope="module")
def model():
    return Dnsmos("cpu", threads=2)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("dnsmos")
    speech = [read_clip(speak(text, root / name)).audio for name, text in SENTENCES.items()]
    noise = read_clip(write_noise(root / "noise.wav")).audio
    return speech, noise


def _speechmos(model: Dnsmos, audio: np.ndarray) -> np.ndarray:
    """speechmos's P.835 path as it runs it (its P.808 model, which needs a mel spectrogram per
    segment from librosa, stubbed out: qtts does not report it)."""
    from speechmos import dnsmos as reference

    class NoP808:
        def run(self, *_):
            return np.zeros((1, 1, 1), np.float32)

    ref = object.__new__(reference.DNSMOS)
    ref.onnx_sess, ref.p808_onnx_sess = model.session, NoP808()
    ref.audio_melspec = lambda audio: np.zeros((1, 1))
    out = ref(audio, SAMPLE_RATE, False)
    return np.array([out["sig_mos"], out["bak_mos"], out["ovrl_mos"]])


def test_batched_scores_equal_speechmos(model, clips):
    speech, noise = clips
    # 26 s: windows 7 to 17 are among those speechmos skips (their end rounds one sample short)
    long = np.concatenate([speech[0]] * int(np.ceil(26 * SAMPLE_RATE / len(speech[0]))))
    batch = [speech[0], long, noise, speech[1]]
    ours = model.score(batch)
    assert ours.shape == (4, 3)
    for audio, row in zip(batch, ours, strict=True):
        np.testing.assert_allclose(row, _speechmos(model, audio), atol=SAME)
    assert len(model.segments(long)) < int(len(long) / SAMPLE_RATE - 9.01) + 1


def test_real_speech_scores_clearly_above_noise(model, clips):
    speech, noise = clips
    scores = model.score([*speech, noise])
    ovrl = scores[:, 2]
    assert ovrl[:-1].min() >= SPEECH_OVRL_MIN, ovrl
    assert ovrl[-1] <= NOISE_OVRL_MAX, ovrl
    assert ovrl[:-1].min() - ovrl[-1] >= MARGIN
    assert scores[:-1, 1].min() > scores[-1, 1] + MARGIN  # and the background is cleaner


def test_a_clip_is_read_as_16_khz_mono(tmp_path):
    stereo = np.stack([np.linspace(-0.5, 0.5, 24_000), np.zeros(24_000)], axis=1)
    sf.write(str(tmp_path / "s.wav"), stereo, 24_000)
    clip = read_clip(tmp_path / "s.wav")
    expected = soxr.resample(stereo.mean(axis=1).astype(np.float32), 24_000, SAMPLE_RATE)
    assert clip.error is None and clip.audio.dtype == np.float32
    np.testing.assert_allclose(clip.audio, expected, atol=1e-4)
    (tmp_path / "bad.wav").write_bytes(b"not audio")
    bad = read_clip(tmp_path / "bad.wav")
    assert bad.audio is None and bad.error.startswith("unreadable audio: ")
    assert "\n" not in bad.error
