"""Voice clone pieces: reference audio checks, the per-job reference cache, the clone prompt's
sizes (prompt_length / trailing_length agree with what embed_clone_prompt builds), the reference
cut, and the job layer's --ref-audio / --ref-text / --x-vector-only defaults."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from golden import GOLDEN

from qtts.core.synthesis.voice_clone import ReferenceCache, cut_reference, load_reference

SR = 24000


def tone(seconds: float, sr: int = SR, amp: float = 0.3, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    wav = (amp * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    return wav if channels == 1 else np.stack([wav] * channels, axis=1)


def write(path: Path, wav: np.ndarray, sr: int = SR) -> str:
    sf.write(str(path), wav, sr)
    return str(path)


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda d: str(d / "nope.wav"), "ref_audio not found"),
        (lambda d: (d / "bad.wav").write_bytes(b"RIFF not audio") and str(d / "bad.wav"),
         "ref_audio unreadable"),
        (lambda d: write(d / "quiet.wav", np.zeros(SR * 2, np.float32)), "ref_audio is silent"),
        (lambda d: write(d / "short.wav", tone(0.9)), "ref_audio too short"),
        (lambda d: write(d / "short8k.wav", tone(0.5, sr=8000), sr=8000), "ref_audio too short"),
    ],
    ids=["missing", "unreadable", "silent", "short", "short-after-resample"],
)  # fmt: skip
def test_bad_reference_audio_is_a_value_error_with_a_reason(tmp_path, make, reason):
    path = make(tmp_path)
    with pytest.raises(ValueError, match=reason):
        load_reference(path)


def test_reference_is_24k_mono_float32(tmp_path):
    stereo = load_reference(write(tmp_path / "s.flac", tone(1.2, channels=2)))
    assert stereo.dtype == np.float32 and stereo.ndim == 1 and stereo.shape[0] == int(1.2 * SR)
    low = load_reference(write(tmp_path / "l.wav", tone(1.5, sr=16000), sr=16000))
    assert low.shape == (int(1.5 * SR),)
    # soxr keeps the tone: compare against the 24 kHz original away from the edges.
    np.testing.assert_allclose(low[2000:-2000], tone(1.5)[2000:-2000], atol=5e-3)


class CountingEncoder(torch.nn.Module):
    """A speaker encoder stand-in (one parameter gives it a device and dtype)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))
        self.calls = 0

    def forward(self, mels):
        self.calls += 1
        return mels.mean(1)[:, :4] * self.w  # [B, 4]


class FakeSpeech:
    def __init__(self):
        self.calls = 0

    def encode(self, wav):
        self.calls += 1
        return torch.zeros(-(-wav.shape[0] // 1920), 16, dtype=torch.long)


def test_each_unique_reference_is_computed_once(tmp_path):
    a = write(tmp_path / "a.wav", tone(1.1))
    b = write(tmp_path / "b.wav", tone(1.3, amp=0.2))
    speech = FakeSpeech()
    loads = []
    cache = ReferenceCache(CountingEncoder(), lambda: loads.append(1) or speech)
    for _ in range(3):
        x = cache.get(a, None)  # x-vector only
        icl = cache.get(a, "hello")
        cache.get(b, "hello")
        cache.get(b, "  ")  # blank text = x-vector only
    assert x.ref_code is None and x.ref_text is None
    assert icl.ref_code.shape == (14, 16) and icl.ref_text == "hello"
    assert cache.computed == 4 and cache.speaker_encoder.calls == 4
    assert speech.calls == 2 and loads == [1]  # Mimi built once, on first ICL use


def test_x_vector_jobs_never_build_the_speech_encoder(tmp_path):
    cache = ReferenceCache(CountingEncoder(), lambda: pytest.fail("built the speech encoder"))
    assert cache.get(write(tmp_path / "a.wav", tone(1.1)), None).ref_code is None


def test_a_bad_reference_fails_every_time_without_rereading(tmp_path):
    cache = ReferenceCache(CountingEncoder(), FakeSpeech)
    for _ in range(2):
        with pytest.raises(ValueError, match="not found"):
            cache.get(str(tmp_path / "gone.wav"), "t")
    with pytest.raises(ValueError, match="missing ref_audio"):
        cache.get(None, "t")
    assert cache.computed == 0


def test_cut_reference_matches_the_official_rounding():
    wav = np.arange(23 * 1920, dtype=np.float32)
    # int(ref / total * samples): float rounding can land one sample early (docs/model.md,
    # "Pitfalls").
    for ref in range(1, 23):
        assert cut_reference(wav, ref, 23).shape[0] == wav.shape[0] - int(ref / 23 * wav.shape[0])
    assert cut_reference(wav[:0], 0, 0).shape == (0,)


@pytest.fixture(scope="module")
def base_talker():
    from qtts.core.model.config import ModelConfig
    from qtts.core.model.loader import load_strict, read_safetensors
    from qtts.core.model.talker import build_model
    from qtts.core.synthesis.prompt import load_tokenizer

    config = ModelConfig.from_file(GOLDEN / "base" / "config.json")
    with torch.device("meta"):
        model = build_model(config)
    load_strict(model, read_safetensors(GOLDEN / "base"), source="base", dtype=torch.float32,
                device="cpu")  # fmt: skip
    return model.talker, config, load_tokenizer(GOLDEN / "base")


@pytest.mark.parametrize(
    "text, ref_text, frames",
    [("A fairly long sentence to speak here.", "ref", 3), ("Hi.", "a longer reference", 20),
     ("Hello there.", None, 0)],
    ids=["icl-text-longer", "icl-codes-longer", "x-vector"],
)  # fmt: skip
def test_clone_prompt_sizes_match_the_embedding(base_talker, text, ref_text, frames):
    from qtts.core.synthesis.prompt import (
        clone_tokens,
        embed_clone_prompt,
        prompt_length,
        prompt_tokens,
        trailing_length,
    )

    talker, config, tok = base_talker
    t = clone_tokens(prompt_tokens(config, tok, text, None, "english", None), tok, ref_text, frames)
    code = torch.randint(0, 2048, (frames, 16)) if ref_text else None
    p = embed_clone_prompt(talker, config, t, torch.randn(16), code)
    assert p.embeds.shape[0] == prompt_length(t)
    assert p.trailing.shape[0] == trailing_length(t)


def test_job_reference_defaults():
    import pyarrow as pa

    from qtts.core.jobs.contract.spec import JobSpec, OutputOptions, VoiceOptions
    from qtts.core.jobs.execution.run import apply_reference_defaults
    from qtts.core.jobs.rows.manifest import ROW_SCHEMA

    rows = pa.Table.from_pylist([{"row": 1, "id": "a", "text": "x"},
                                 {"row": 2, "id": "b", "text": "y", "ref_audio": "own.wav",
                                  "ref_text": "own"}], schema=ROW_SCHEMA)  # fmt: skip
    out = OutputOptions(Path("o"))
    voice = VoiceOptions(ref_audio="cli.wav", ref_text="cli text")
    spec = JobSpec("batch", "m.parquet", out, voice=voice)
    a, b = apply_reference_defaults(rows, spec).to_pylist()
    assert Path(a["ref_audio"]).is_absolute() and a["ref_audio"].endswith("cli.wav")
    assert (a["ref_text"], b["ref_audio"], b["ref_text"]) == ("cli text", "own.wav", "own")
    spec = JobSpec("batch", "m.parquet", out, voice=VoiceOptions(x_vector_only=True))
    assert apply_reference_defaults(rows, spec)["ref_text"].to_pylist() == [None, None]


def _speaker_encoder(width: int = 16):
    from qtts.core.model.config import SpeakerEncoderConfig
    from qtts.core.model.speaker_encoder import SpeakerEncoder
    from qtts.core.tiny.base_parts import speaker_encoder_config

    return SpeakerEncoder(SpeakerEncoderConfig.from_dict(speaker_encoder_config(width)))


def _voice_file(path: Path, width: int = 16, transcript: str | None = "its words") -> str:
    from qtts.core.model.voice_file import IN_CONTEXT, X_VECTOR, Voice, write_voice

    rng = np.random.default_rng(3)
    codes = rng.integers(0, 2048, size=(10, 16), dtype=np.int64) if transcript else None
    xvec = rng.standard_normal(width).astype(np.float32)
    mode = IN_CONTEXT if transcript else X_VECTOR
    write_voice(path, Voice(mode, transcript, xvec, codes, "id", model_name="m"))
    return str(path)


def test_a_voice_file_stands_in_for_its_clip_and_is_read_once_a_mode(tmp_path, monkeypatch):
    import qtts.core.model.voice_file as voice_file

    path = _voice_file(tmp_path / "n.voice")
    reads = []
    real = voice_file.read_voice
    monkeypatch.setattr(voice_file, "read_voice", lambda p: reads.append(p) or real(p))
    cache = ReferenceCache(_speaker_encoder(), lambda: pytest.fail("a voice needs no encoder"))
    for _ in range(2):
        icl = cache.get(None, "its words", path)
        x = cache.get(None, None, path)  # x-vector only: its embedding alone
    stored = real(path)
    assert torch.equal(icl.ref_code, torch.from_numpy(stored.ref_codes))
    assert icl.ref_text == "its words" and (x.ref_code, x.ref_text) == (None, None)
    assert torch.equal(x.x_vector, torch.from_numpy(stored.x_vector))  # the stored values
    assert reads == [path, path] and cache.computed == 0  # no clip was embedded


def test_a_voice_of_another_width_fails_its_rows_with_the_reason(tmp_path):
    path = _voice_file(tmp_path / "wide.voice", width=32)
    cache = ReferenceCache(_speaker_encoder(16), FakeSpeech)
    for _ in range(2):
        with pytest.raises(ValueError, match="32-wide speaker embedding; this model's is 16 wide"):
            cache.get(None, "its words", path)
