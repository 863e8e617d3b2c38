"""What every system's run shares: the rows, the reference clip, WAV files, the frame budget per
system, and the one JSON line a run prints.

Runs in every peer's environment (transformers 4 or 5, with or without qtts importable), so it
imports only the standard library and numpy. Knows no model: each system's module calls its own.
"""

from __future__ import annotations

import json
import math
import os
import platform
import wave
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920  # 12.5 Hz codec frames at 24 kHz
SPEAKERS = ["vivian", "ryan", "aiden", "serena"]  # CustomVoice rows cycle through these
LANGUAGE = "English"
# Sentences of 55-80 characters; row i takes SENTENCES[i % len] with its number in front.
SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "She sells sea shells by the sea shore, and the shells are surely real.",
    "A journey of a thousand miles begins with a single careful step.",
    "Every morning the baker opens his shop before the sun comes up.",
    "Please remember to water the plants while I am away this week.",
    "The train to the city leaves at seven, so do not be late tonight.",
]


@dataclass(frozen=True)
class Row:
    id: str
    text: str
    speaker: str


def make_rows(count: int) -> list[Row]:
    return [
        Row(f"r{i:04d}", f"Row {i}. {SENTENCES[i % len(SENTENCES)]}", SPEAKERS[i % 4])
        for i in range(count)
    ]


def write_rows(rows: list[Row], path: Path) -> Path:
    """JSON Lines with id, text and speaker: a manifest `qtts batch` reads as it is."""
    lines = [json.dumps({"id": r.id, "text": r.text, "speaker": r.speaker}) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_rows(path: Path, limit: int | None = None) -> list[Row]:
    rows = [Row(**json.loads(line)) for line in path.read_text("utf-8").splitlines() if line]
    return rows[:limit] if limit else rows


def write_reference(path: Path, seconds: float = 3.0) -> Path:
    """A voice-like test clip (a gliding harmonic tone with vibrato and a little noise), 24 kHz
    mono 16-bit PCM, written with the standard library's wave module."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    pitch = 140 + 30 * np.sin(2 * np.pi * 0.7 * t) + 5 * np.sin(2 * np.pi * 5.5 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / SAMPLE_RATE
    voice = sum(np.sin(k * phase) / k for k in range(1, 6))
    envelope = 0.5 + 0.5 * np.abs(np.sin(2 * np.pi * 1.5 * t))  # syllable-like rises
    noise = np.random.default_rng(0).standard_normal(t.size)
    write_wav(path, 0.25 * envelope * voice + 0.01 * noise)
    return path


def write_wav(path: Path, audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """Mono float audio in [-1, 1] -> 16-bit PCM WAV (what every system's run writes per row)."""
    pcm = (np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """16-bit PCM WAV -> (mono float32 [S], sample rate)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: not 16-bit PCM")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        pcm = pcm.reshape(-1, w.getnchannels()).mean(axis=1)
        return (pcm / 32768.0).astype(np.float32), w.getframerate()


def wav_frames(folder: Path) -> dict[str, int]:
    """Row id -> codec frames of its WAV (samples / 1920), for every *.wav in `folder`."""
    out = {}
    for p in sorted(folder.glob("*.wav")):
        with wave.open(str(p), "rb") as w:
            out[p.stem] = w.getnframes() // SAMPLES_PER_FRAME
    return out


# Talker steps each system is given so that a row that never stops gets exactly `frames` codec
# frames: the official code and qtts return max_new_tokens - 1 frames (the last step's code 0
# never gets its other 15 codes), faster-qwen3-tts(-batch) return max_new_tokens frames.
BUDGET_OFFSET = {"official": 1, "qtts": 1, "faster": 0, "faster_batch": 0}


def max_new_tokens(system: str, frames: int) -> int:
    return frames + BUDGET_OFFSET[system]


def seq_len_bound(rows: list[Row], frames: int) -> int:
    """A static KV length that holds any row's prompt and its frames (faster-qwen3-tts sizes its
    CUDA-graph cache by it; it stops a row early past it, so too small would cut frames): the
    prompt has at most one position per text byte plus the template's ~16, in either text mode.
    Rounded up to 64; smaller than the peers' default 2048, as a user who knows the lengths sets
    it (a longer cache costs attention time every step)."""
    longest = max(len(r.text.encode("utf-8")) for r in rows)
    return int(math.ceil((longest + 32 + frames) / 64) * 64)


@dataclass
class RunResult:
    """The one JSON line a system's run prints. `audio_s_per_s` bills the system's warmup (graph
    captures, a first short call; qtts: a short job on the loaded model) to the run;
    `after_warmup_audio_s_per_s` leaves it out."""

    system: str
    kind: str  # base | custom_voice
    rows: int
    batch: int | str
    frames_budget: int
    frames_made: int
    frames_per_row: list[int]  # [min, max]
    audio_s: float
    wall_s: float  # after load and warmup: prompts, generation, decode, WAVs written
    load_s: float
    warmup_s: float
    device: str
    dtype: str
    versions: dict[str, str]
    notes: str = ""
    audio_s_per_s: float = 0.0
    after_warmup_audio_s_per_s: float = 0.0

    def __post_init__(self) -> None:
        spent = self.wall_s + self.warmup_s
        self.audio_s_per_s = round(self.audio_s / spent, 3) if spent > 0 else 0.0
        self.after_warmup_audio_s_per_s = (
            round(self.audio_s / self.wall_s, 3) if self.wall_s else 0.0
        )
        self.audio_s, self.wall_s = round(self.audio_s, 3), round(self.wall_s, 3)
        self.load_s, self.warmup_s = round(self.load_s, 3), round(self.warmup_s, 3)

    def line(self) -> str:
        return json.dumps(asdict(self))


def collect(out_dir: Path, rows: list[Row], frames: int) -> tuple[int, list[int], float]:
    """(frames made, [min, max] per row, audio seconds) from the WAVs a run wrote; a row without
    its WAV counts 0 frames."""
    made = wav_frames(out_dir)
    per_row = [made.get(r.id, 0) for r in rows]
    total = sum(per_row)
    return total, [min(per_row), max(per_row)], total * SAMPLES_PER_FRAME / SAMPLE_RATE


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def versions(*packages: str) -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("torch", "transformers", *packages):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "?"
    return out
