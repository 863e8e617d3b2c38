"""Real speech for qtts score's tests: espeak-ng (a Debian package; .ci/run installs it) speaks a
few sentences into WAV files, beside white noise and a corrupt file, as an AudioFolder
(metadata.jsonl with file_name and text). Without espeak-ng the tests that need it skip on a
developer's machine and fail in CI (CI=true), where .ci/run must have installed it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

SENTENCES = {
    "speech1.wav": "The quick brown fox jumps over the lazy dog.",
    "speech2.wav": "Speech quality is measured by a neural network that predicts listeners.",
    "speech3.wav": "Every row of the dataset is scored once, and a rerun skips it.",
}
NOISE = "noise.wav"
CORRUPT = "corrupt.wav"
NOISE_RATE = 24_000  # qtts writes 24 kHz: the noise is resampled as a qtts file would be
NOISE_S = 3.0


def espeak() -> str:
    """The espeak-ng binary, or skip (fail in CI)."""
    found = shutil.which("espeak-ng")
    if found is None:
        message = "espeak-ng is not installed (apt-get install espeak-ng; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def speak(text: str, path: Path, voice: str | None = None) -> Path:
    """text spoken into path (a WAV file); voice: espeak-ng's -v (en-us, en-us+m7, ...)."""
    chosen = [] if voice is None else ["-v", voice]
    subprocess.run([espeak(), *chosen, "-w", str(path), text], check=True, capture_output=True)
    return path


def write_noise(path: Path, seed: int = 0) -> Path:
    import soundfile as sf

    rng = np.random.default_rng(seed)
    noise = np.clip(rng.standard_normal(int(NOISE_RATE * NOISE_S)) * 0.3, -1, 1)
    sf.write(str(path), noise, NOISE_RATE, subtype="PCM_16")
    return path


def make_audiofolder(root: Path, *, corrupt: bool = True) -> Path:
    """Speech clips, one of noise and (corrupt=True) one corrupt file, with metadata.jsonl."""
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, text in SENTENCES.items():
        speak(text, root / name)
        rows.append({"file_name": name, "text": text, "language": "english"})
    write_noise(root / NOISE)
    rows.append({"file_name": NOISE, "text": "noise"})
    if corrupt:
        (root / CORRUPT).write_bytes(b"RIFF\x10\x00\x00\x00WAVEnot really audio")
        rows.append({"file_name": CORRUPT, "text": "a corrupt file"})
    with open(root / "metadata.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return root


def copy_folder(source: Path, dest: Path) -> Path:
    """A fresh copy (new mtimes would make every file stale: copy2 keeps them)."""
    shutil.copytree(source, dest, copy_function=shutil.copy2)
    return dest
