"""Resemblyzer's GE2E speaker encoder (a 3-layer LSTM over 40 mel bands, 256-dim unit embeddings),
run here from the trained weights its PyPI wheel ships (resemblyzer/pretrained.pt), with its own
preprocessing: loudness raised to -30 dBFS, pauses longer than ~0.2 s cut by the WebRTC voice
activity detector, 1.6 s partial windows 1.3 times a second, their embeddings averaged.

The `resemblyzer` package is never imported: its __init__ imports `webrtcvad`, whose module
imports `pkg_resources` (gone from setuptools 81). The VAD's C extension (`_webrtcvad`, from the
same `webrtcvad` distribution) is called directly instead, so no setuptools pin is needed, and
the partial windows of many clips go through the LSTM in one batch. The embeddings equal
resemblyzer's own (tests/unit/quality/test_speaker.py). Knows samples and the weights file; no
tables, no files of the dataset.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import version
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16_000
MEL_BANDS, N_FFT, HOP = 40, 400, 160  # 25 ms windows, 10 ms steps
PARTIAL_FRAMES = 160  # 1.6 s per partial window
PARTIAL_RATE, MIN_COVERAGE = 1.3, 0.75  # resemblyzer's embed_utterance defaults
TARGET_DBFS = -30.0
VAD_WINDOW = 480  # 30 ms at 16 kHz
VAD_MODE, VAD_AVERAGE, VAD_MAX_SILENCE = 3, 8, 6
INT16_MAX = 2**15 - 1
HIDDEN = 256


def weights_file() -> Path:
    """resemblyzer/pretrained.pt, found without importing the package."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'resemblyzer'")
    return Path(list(spec.submodule_search_locations)[0]) / "pretrained.pt"


def identity() -> str:
    """What makes two GE2E embeddings comparable: resemblyzer's release (its weights)."""
    return f"resemblyzer-{version('resemblyzer')}:ge2e/webrtcvad{VAD_MODE}"


class Ge2e:
    """embed(clips) -> [clips, 256] unit vectors; clips: float32 16 kHz mono."""

    def __init__(self, device: str = "cpu") -> None:
        import torch
        from torch import nn

        state = torch.load(weights_file(), map_location="cpu", weights_only=True)["model_state"]
        self.lstm = nn.LSTM(MEL_BANDS, HIDDEN, 3, batch_first=True)
        self.linear = nn.Linear(HIDDEN, HIDDEN)
        self.lstm.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("lstm.")})
        self.linear.load_state_dict({k[7:]: v for k, v in state.items() if k.startswith("linear.")})
        self.device = torch.device(device)
        self.lstm.to(self.device).eval()
        self.linear.to(self.device).eval()

    def embed(self, clips: list[np.ndarray]) -> np.ndarray:
        import torch

        mels, owner = [], []
        for k, audio in enumerate(clips):
            parts = partials(preprocess(audio))
            mels.extend(parts)
            owner.extend([k] * len(parts))
        with torch.inference_mode():
            x = torch.from_numpy(np.stack(mels)).to(self.device)
            _, (hidden, _) = self.lstm(x)
            raw = torch.relu(self.linear(hidden[-1]))
            parts = (raw / torch.norm(raw, dim=1, keepdim=True)).cpu().numpy()
        sums = np.zeros((len(clips), HIDDEN), dtype=np.float64)
        np.add.at(sums, np.asarray(owner), parts)
        mean = sums / np.bincount(owner, minlength=len(clips))[:, None]
        return (mean / np.linalg.norm(mean, axis=1, keepdims=True)).astype(np.float32)


def preprocess(audio: np.ndarray) -> np.ndarray:
    """resemblyzer's preprocess_wav on 16 kHz samples: louder to TARGET_DBFS (never quieter),
    long pauses cut. A clip in which the VAD hears no voice at all is kept whole."""
    rms = np.sqrt(np.mean((audio.astype(np.float64) * INT16_MAX) ** 2))
    change = TARGET_DBFS - 20 * np.log10(rms / INT16_MAX)
    if change > 0:
        audio = audio * (10 ** (change / 20))
    trimmed = _trim_long_silences(audio)
    return trimmed if len(trimmed) else audio


def _trim_long_silences(audio: np.ndarray) -> np.ndarray:
    import _webrtcvad
    from scipy.ndimage import binary_dilation

    audio = audio[: len(audio) - len(audio) % VAD_WINDOW]
    pcm = np.round(audio * INT16_MAX).astype(np.int16).tobytes()  # wraps past full scale, as there
    vad = _webrtcvad.create()
    _webrtcvad.init(vad)
    _webrtcvad.set_mode(vad, VAD_MODE)
    step = 2 * VAD_WINDOW
    flags = np.array(
        [
            _webrtcvad.process(vad, SAMPLE_RATE, pcm[at : at + step], VAD_WINDOW)
            for at in range(0, len(pcm), step)
        ],
        dtype=np.float64,
    )
    if not len(flags):
        return audio
    padded = np.concatenate((np.zeros((VAD_AVERAGE - 1) // 2), flags, np.zeros(VAD_AVERAGE // 2)))
    sums = np.cumsum(padded)
    sums[VAD_AVERAGE:] = sums[VAD_AVERAGE:] - sums[:-VAD_AVERAGE]
    mask = np.round(sums[VAD_AVERAGE - 1 :] / VAD_AVERAGE).astype(bool)
    mask = binary_dilation(mask, np.ones(VAD_MAX_SILENCE + 1))
    return audio[np.repeat(mask, VAD_WINDOW)]


def partials(audio: np.ndarray) -> list[np.ndarray]:
    """The clip's partial windows as mel frames [PARTIAL_FRAMES, MEL_BANDS] (embed_utterance's
    slices: the last kept only when it is at least MIN_COVERAGE full; the clip zero-padded)."""
    import librosa

    frames = int(np.ceil((len(audio) + 1) / HOP))
    step = int(np.round((SAMPLE_RATE / PARTIAL_RATE) / HOP))
    starts = list(range(0, max(1, frames - PARTIAL_FRAMES + step + 1), step))
    last = starts[-1] * HOP
    coverage = (len(audio) - last) / (PARTIAL_FRAMES * HOP)
    if coverage < MIN_COVERAGE and len(starts) > 1:
        starts = starts[:-1]
    end = (starts[-1] + PARTIAL_FRAMES) * HOP
    if end >= len(audio):
        audio = np.pad(audio, (0, end - len(audio)))
    mel = librosa.feature.melspectrogram(
        y=audio, sr=SAMPLE_RATE, n_fft=N_FFT, hop_length=HOP, n_mels=MEL_BANDS
    )
    mel = mel.astype(np.float32).T
    return [mel[s : s + PARTIAL_FRAMES] for s in starts]
