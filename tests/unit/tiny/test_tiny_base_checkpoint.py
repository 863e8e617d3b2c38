"""The tiny Base (voice clone) checkpoint: the published layout (the official code's own Base
fixture is the yardstick), strict loads of the speaker encoder and the Mimi encoder, and a
`qtts batch --ref-audio --x-vector-only` run on it."""

from __future__ import annotations

import json
import math
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.model.config import ModelConfig
from qtts.core.model.speaker_encoder import SpeakerEncoder, x_vector
from qtts.core.synthesis.voice_clone import SpeechEncoder
from qtts.core.tiny import base_parts
from qtts.core.tiny.checkpoint import make_tiny_checkpoint

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    torch.set_num_threads(1)
    return make_tiny_checkpoint(tmp_path_factory.mktemp("base"), model_type="base", greedy=True)


def _shapes(path: Path, prefix: str) -> dict[str, list[int]]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_slice(k).get_shape() for k in f.keys() if k.startswith(prefix)}


def test_the_layout_is_the_official_base_fixture(base):
    """Same tensor names and shapes as the Base checkpoint the official code wrote, for the
    speaker encoder and the speech tokenizer's encoder half; the same config blocks."""
    ours = _shapes(base / "model.safetensors", "speaker_encoder.")
    assert ours == _shapes(GOLDEN / "base" / "model.safetensors", "speaker_encoder.")
    st = "speech_tokenizer/model.safetensors"
    assert _shapes(base / st, "encoder.") == _shapes(GOLDEN / "base" / st, "encoder.")
    config = json.loads((base / "config.json").read_text())
    golden = json.loads((GOLDEN / "base" / "config.json").read_text())
    assert config["tts_model_type"] == "base" and config["talker_config"]["spk_id"] == {}
    assert config["speaker_encoder_config"] == golden["speaker_encoder_config"]
    st_config = json.loads((base / "speech_tokenizer" / "config.json").read_text())
    assert (
        st_config["encoder_config"]
        == json.loads((GOLDEN / "speech_tokenizer" / "config.json").read_text())["encoder_config"]
    )


def test_published_widths_get_the_published_speaker_encoder():
    block = base_parts.speaker_encoder_config(1024)
    assert block["enc_channels"] == [512, 512, 512, 512, 1536] and block["enc_dim"] == 1024
    assert base_parts.speaker_encoder_config(256)["enc_channels"] == [16, 16, 16, 16, 48]


def test_encoders_load_strictly_and_the_x_vector_is_tame(base):
    config = ModelConfig.from_file(base / "config.json")
    encoder = SpeakerEncoder(config.speaker_encoder)
    with safe_open(str(base / "model.safetensors"), "pt") as f:
        tensors = {k.removeprefix("speaker_encoder."): f.get_tensor(k) for k in f.keys()
                   if k.startswith("speaker_encoder.")}  # fmt: skip
    encoder.load_state_dict(tensors, strict=True)
    clip = np.random.default_rng(1).standard_normal(48000).astype(np.float32) * 0.1
    xvec = x_vector(encoder, clip)
    assert xvec.shape == (config.talker.hidden_size,) and torch.isfinite(xvec).all()
    assert 0.05 < float(xvec.std()) < 5  # near XVECTOR_STD: one input among embeddings of ~0.5
    st_dir = base / "speech_tokenizer"
    st_config = json.loads((st_dir / "config.json").read_text())
    codes = SpeechEncoder(st_dir, st_config, torch.device("cpu")).encode(clip)  # strict load
    assert codes.shape == (math.ceil(48000 / 1920), 16)


def test_qtts_batch_clones_from_the_x_vector(base, tmp_path):
    ref = tmp_path / "ref.wav"
    t = np.arange(36000) / 24000
    with wave.open(str(ref), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes((0.3 * np.sin(2 * np.pi * 180 * t) * 32767).astype("<i2").tobytes())
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a", "text": "Hello there."}\n{"id": "b", "text": "A second row."}\n')
    out = tmp_path / "out"
    args = ["batch", str(rows), "--model", str(base), "--ref-audio", str(ref), "--x-vector-only",
            "--device", "cpu", "--dtype", "float32", "--max-new-tokens", "5", "--out-dir",
            str(out), "-q"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["ok"], summary["failed"]) == (2, 0)
    for name in ("a", "b"):
        with wave.open(str(out / f"{name}.wav")) as w:
            frames, rest = divmod(w.getnframes(), 1920)
            assert rest == 0 and 1 <= frames <= 4  # at most max_new_tokens - 1 frames
