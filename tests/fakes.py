"""A fake model for job-layer and CLI tests: deterministic codes, a sine for audio, no weights.

Selected in a subprocess with QTTS_FAKE_SYNTH=fakes (and tests/ on PYTHONPATH). Model strings pick
the kind: containing "base" -> Base, "design" -> VoiceDesign, "0.6b" -> 0.6B; "missing" fails to
load. Markers in a row's text steer it: "[fail]" -> RowFailure, "[nan]" -> NaN audio,
"[runaway]" -> hits the frame budget, "[runaway:N]" -> hits it on its first N tries (retried as
the real synthesizer does: each try drawn with requests.attempt_seed), "[slow]" -> sleeps
QTTS_FAKE_SLOW seconds, "[stubborn]" ->
sleeps and ignores the first interrupt (a synthesizer stuck in native code); both touch the file
QTTS_FAKE_MARK names, if set, when they start.
QTTS_FAKE_DELAY adds seconds per row to every row. Rows come back in reverse order, so the job
layer never relies on completion order.
"""

from __future__ import annotations

import os
import re
import sys
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from qtts.core.errors import VoiceError
from qtts.core.model.config import GenerationDefaults, ModelConfig
from qtts.core.model.languages import language_name
from qtts.core.synthesis.requests import (
    GenerationOptions,
    Request,
    RowFailure,
    Utterance,
    attempt_seed,
)

SPEAKERS = {"vivian": 3065, "ryan": 3061, "eric": 2875}
LANGUAGES = {"english": 2050, "chinese": 2055, "german": 2053}
SAMPLES_PER_FRAME = 1920


def _stack(hidden: int, vocab: int) -> dict:
    return {"hidden_size": hidden, "intermediate_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
            "vocab_size": vocab}  # fmt: skip


def make_config(model_type: str = "custom_voice", size: str = "1b7") -> ModelConfig:
    talker = {**_stack(32, 3072), "code_predictor_config": _stack(32, 2048)}
    if model_type == "custom_voice":
        talker["spk_id"] = SPEAKERS
    talker["codec_language_id"] = LANGUAGES
    return ModelConfig.from_dict(
        {
            "model_type": "qwen3_tts",
            "tts_model_type": model_type,
            "tts_model_size": size,
            "talker_config": talker,
        }  # fmt: skip
    )


class FakeTextModel:
    sample_rate = 24000

    def __init__(self, name: str) -> None:
        lowered = name.lower()
        kind = "base" if "base" in lowered else "voice_design" if "design" in lowered else None
        self.name = name
        self.config = make_config(kind or "custom_voice", "0b6" if "0.6b" in lowered else "1b7")
        cap = int(os.environ.get("QTTS_FAKE_MAX_NEW_TOKENS", "2048"))
        self.defaults = GenerationDefaults(max_new_tokens=cap)

    def normalize_row(self, speaker, language, instruct):
        language = language_name(language or "auto", self.config.supported_languages())
        if language not in self.config.supported_languages():
            langs = ", ".join(self.config.supported_languages())
            raise VoiceError(
                f"unknown language {language!r}; this model supports: {langs}", "language"
            )
        speaker = (speaker or "").strip().lower() or None
        if self.config.uses_speaker and speaker not in SPEAKERS:
            what = "speaker is required" if speaker is None else f"unknown speaker {speaker!r}"
            raise VoiceError(f"{what}; this model has: {', '.join(sorted(SPEAKERS))}", "speaker")
        instruct = instruct if instruct and instruct.strip() else None
        if instruct is not None and not self.config.honours_instruct:
            return speaker, language, None, "instruct ignored: 0.6B CustomVoice models"
        return speaker, language, instruct, None

    max_tokens_per_byte = 1.0  # a word has at least one byte

    @property
    def identity(self) -> str:
        return f"fake:{self.name}:{self.defaults.max_new_tokens}"

    @property
    def voice_identity(self) -> str | None:
        """Base fakes: one identity per name (fake_voice writes a voice file that matches it)."""
        return f"fake-voice:{self.name}" if self.config.tts_model_type == "base" else None

    def count_text_tokens(self, texts) -> list[int]:
        return [len(t.split()) for t in texts]

    def resolve_precision(self, device: str, dtype: str) -> tuple[str, str, str]:
        """As the real one on a CPU: auto follows QTTS_CPU_BF16 (the suite sets 0)."""
        if device.startswith("cuda"):
            from qtts.core.errors import UsageError

            raise UsageError(f"--device {device}: CUDA is not available on this machine (fake)")
        if dtype != "auto":
            return "cpu", dtype, ""
        from qtts.core.model.cpu_precision import auto_cpu_precision

        auto = auto_cpu_precision()
        return "cpu", auto.dtype, auto.reason

    def memory_plan(self, requests, placement) -> str:
        return f"fake plan: {len(requests)} rows, batch {placement.batch_size or 'auto'}"


def runs_away(text: str, attempt: int = 1) -> bool:
    """Whether try `attempt` of a row with this text hits its frame budget."""
    tries = re.search(r"\[runaway:(\d+)\]", text)
    return "[runaway]" in text or (tries is not None and attempt <= int(tries.group(1)))


def fake_codes(request: Request, attempt: int = 1) -> np.ndarray:
    """Deterministic in (seed, text, attempt): int64 [frames, 16]."""
    frames = min(2 + len(request.text) // 4, max(request.max_new_tokens - 1, 0))
    if runs_away(request.text, attempt):
        frames = max(request.max_new_tokens - 1, 0)
    key = zlib.crc32(request.text.encode()) ^ attempt_seed(request.seed, attempt)
    return np.random.default_rng(key).integers(0, 2048, size=(frames, 16), dtype=np.int64)


def fake_audio(codes: np.ndarray, sample_rate: int = 24000) -> np.ndarray:
    t = np.arange(len(codes) * SAMPLES_PER_FRAME, dtype=np.float32) / sample_rate
    pitch = 200.0 + float(codes[0, 0]) / 8 if len(codes) else 200.0
    return (0.5 * np.sin(2 * np.pi * pitch * t)).astype(np.float32)


class FakeSynthesizer:
    def __init__(self, sample_rate: int = 24000) -> None:
        self.sample_rate = sample_rate
        self.calls: list[list[str]] = []

    def synthesize(
        self, requests: Sequence[Request], options: GenerationOptions
    ) -> Iterator[Utterance | RowFailure]:
        self.calls.append([r.id for r in requests])
        delay = float(os.environ.get("QTTS_FAKE_DELAY", "0"))
        for r in reversed(list(requests)):
            time.sleep(delay)
            if "[slow]" in r.text or "[stubborn]" in r.text:
                _mark_busy()
            if "[slow]" in r.text:
                time.sleep(float(os.environ.get("QTTS_FAKE_SLOW", "30")))
            if "[stubborn]" in r.text:
                _sleep_through_interrupts(60)
            if "[fail]" in r.text:
                yield RowFailure(r.id, "fake failure for this row")
                continue
            for attempt in range(1, options.attempts + 1):  # the synthesizer's retry rule
                codes = fake_codes(r, attempt)
                hit = runs_away(r.text, attempt) or len(codes) >= r.max_new_tokens - 1
                if not hit:
                    break
            audio = fake_audio(codes, self.sample_rate)
            if "[nan]" in r.text and audio.size:
                audio[len(audio) // 2] = np.nan
            yield Utterance(r.id, codes, audio, self.sample_rate, hit_frame_budget=hit,
                            attempts=attempt, seed=attempt_seed(r.seed, attempt))  # fmt: skip


def _mark_busy() -> None:
    """Tell a waiting test that synthesis is under way (QTTS_FAKE_MARK names a file)."""
    mark = os.environ.get("QTTS_FAKE_MARK")
    if mark:
        Path(mark).touch()


def _sleep_through_interrupts(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except BaseException:  # noqa: BLE001 -- deliberately deaf, like a stuck CUDA call
            pass


def open_text_model(model: str) -> FakeTextModel:
    if "missing" in model:
        from qtts.core.model.hub import ModelLoadError

        raise ModelLoadError(f"model not found: {model} (fake)")
    return FakeTextModel(model)


def load_synthesizer(text_model: FakeTextModel, placement) -> FakeSynthesizer:
    if os.environ.get("QTTS_FAKE_LOAD_FAIL"):
        from qtts.core.model.hub import ModelLoadError

        raise ModelLoadError("cannot load weights (fake)")
    return FakeSynthesizer(text_model.sample_rate)


def fake_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess `qtts` run on this fake model."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    env["QTTS_FAKE_SYNTH"] = "fakes"
    for key in ("QTTS_FAKE_DELAY", "QTTS_FAKE_LOAD_FAIL", "QTTS_FAKE_MAX_NEW_TOKENS", "QTTS_DEBUG"):
        env.pop(key, None)
    env.update(extra)
    return env


def qtts_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "qtts", *map(str, args)]


def fake_voice(path: Path, model: str = "fake-base", transcript: str | None = "words") -> Path:
    """A voice file the fake Base model `model` takes (its voice identity), in-context when
    `transcript` is given, else x-vector only; its contents are random (the fake ignores them)."""
    from qtts.core.model.voice_file import IN_CONTEXT, X_VECTOR, Voice, write_voice

    rng = np.random.default_rng(zlib.crc32(str(path).encode()))
    codes = rng.integers(0, 2048, size=(12, 16), dtype=np.int64) if transcript else None
    mode = IN_CONTEXT if transcript else X_VECTOR
    xvec = rng.standard_normal(32).astype(np.float32)
    identity = FakeTextModel(model).voice_identity or ""
    write_voice(path, Voice(mode, transcript, xvec, codes, identity, model_name=model))
    return path
