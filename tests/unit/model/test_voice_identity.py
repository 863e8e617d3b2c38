"""The identity a voice file carries: the same encoders anywhere give the same identity, another
Base checkpoint's speaker encoder (one value changed is enough) another, the talker's weights
none of it; a checkpoint that is no Base one has none."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from qtts.core.model.voice_identity import voice_identity
from qtts.core.tiny.checkpoint import make_tiny_checkpoint


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    torch.set_num_threads(1)
    return make_tiny_checkpoint(tmp_path_factory.mktemp("base"), model_type="base")


def _copy(base, tmp_path, name="copy"):
    return shutil.copytree(base, tmp_path / name)


def _edit(model_dir, pick) -> None:
    """One value of the first tensor `pick` chooses, changed in place in model.safetensors."""
    path = model_dir / "model.safetensors"
    tensors = load_file(str(path))
    name = next(n for n in sorted(tensors) if pick(n))
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] += 0.5
    save_file(tensors, str(path))


def test_the_same_encoders_anywhere_are_the_same_voice_owner(base, tmp_path):
    identity = voice_identity(base)
    assert identity and len(identity) == 16
    assert voice_identity(_copy(base, tmp_path)) == identity


def test_one_speaker_encoder_value_changed_is_another_owner(base, tmp_path):
    other = _copy(base, tmp_path)
    _edit(other, lambda n: n.startswith("speaker_encoder."))
    assert voice_identity(other) != voice_identity(base)


def test_the_talkers_weights_are_no_part_of_it(base, tmp_path):
    """A talker tuned over the same encoders makes the same voice from a clip: it may use it."""
    other = _copy(base, tmp_path)
    _edit(other, lambda n: n.startswith("talker."))
    assert voice_identity(other) == voice_identity(base)


def test_the_speech_tokenizers_encoder_layout_is_part_of_it(base, tmp_path):
    other = _copy(base, tmp_path)
    config = other / "speech_tokenizer" / "config.json"
    data = json.loads(config.read_text())
    data["encoder_valid_num_quantizers"] = 8
    config.write_text(json.dumps(data))
    assert voice_identity(other) != voice_identity(base)


def test_a_checkpoint_that_is_no_base_one_has_none(base, tmp_path):
    other = _copy(base, tmp_path)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "tts_model_type": "custom_voice"}))
    assert voice_identity(other) is None
