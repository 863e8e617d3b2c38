"""The tiny-checkpoint maker: published layout, strict load, a greedy run, determinism."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from qtts.core.model.config import GenerationDefaults, ModelConfig
from qtts.core.model.hub import check_checkpoint_files
from qtts.core.model.loader import read_safetensors
from qtts.core.model.weights import load_weights
from qtts.core.synthesis.requests import GenerationOptions, Request
from qtts.core.synthesis.session import CheckpointText
from qtts.core.synthesis.synthesizer import Synthesizer
from qtts.core.tiny.checkpoint import LANGUAGES, SPEAKERS, make_tiny_checkpoint, resolve_dims
from qtts.core.tiny.tokenizer import SPECIAL_TOKENS

ROWS = [("Hello there, this is a test.", "vivian", "english"), ("Short", "eric", "auto")]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny ops: on a busy 2-core box each OpenMP handoff costs more than the math (~10 ms/op)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def cv17(tmp_path_factory, one_thread):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("cv17"), greedy=True)


def _synthesize(model_dir, budget):
    text = CheckpointText("tiny", model_dir)
    model, decoder = load_weights(text.model_dir, text.config, torch.device("cpu"), torch.float32)
    synth = Synthesizer(text, model, decoder, torch.device("cpu"), generator="naive")
    opts = GenerationOptions(text.defaults.talker, text.defaults.subtalker)
    reqs = [
        Request(f"r{i}", t, i + 1, speaker=s, language=lang, max_new_tokens=budget)
        for i, (t, s, lang) in enumerate(ROWS)
    ]
    return list(synth.synthesize(reqs, opts))


def test_layout_config_and_token_ids(cv17):
    check_checkpoint_files(cv17)
    cfg = ModelConfig.from_file(cv17 / "config.json")
    assert (cfg.tts_model_type, cfg.tts_model_size) == ("custom_voice", "1b7")
    assert cfg.talker.spk_id == SPEAKERS
    assert cfg.talker.spk_is_dialect["eric"] == "sichuan_dialect"
    assert cfg.talker.codec_language_id["beijing_dialect"] == 2074
    assert cfg.supported_languages() == ["auto", *sorted(LANGUAGES)]
    assert (cfg.talker.codec_eos_token_id, cfg.talker.codec_pad_id) == (2150, 2148)
    assert cfg.talker.num_code_groups == cfg.code_predictor.num_code_groups == 16
    defaults = GenerationDefaults.from_file(cv17 / "generation_config.json")
    assert not defaults.talker.do_sample and not defaults.subtalker.do_sample
    assert defaults.talker.repetition_penalty == 1.05 and defaults.max_new_tokens == 8192
    vocab = json.loads((cv17 / "vocab.json").read_text("utf-8"))
    tok_cfg = json.loads((cv17 / "tokenizer_config.json").read_text("utf-8"))
    by_name = {v["content"]: int(k) for k, v in tok_cfg["added_tokens_decoder"].items()}
    assert set(by_name) == set(SPECIAL_TOKENS)
    assert cfg.tts_pad_token_id == by_name["<tts_pad>"]
    assert cfg.tts_bos_token_id == by_name["<tts_text_bos>"]
    assert cfg.tts_eos_token_id == by_name["<tts_text_eod>"]
    assert cfg.im_start_token_id == by_name["<|im_start|>"]
    assert cfg.talker.text_vocab_size == len(vocab) + len(SPECIAL_TOKENS)
    st = json.loads((cv17 / "speech_tokenizer" / "config.json").read_text("utf-8"))
    assert st["model_type"] == "qwen3_tts_tokenizer_12hz"
    dec = st["decoder_config"]
    assert (dec["codebook_size"], dec["num_quantizers"], st["decode_upsample_rate"]) == (
        2048,
        16,
        1920,
    )
    total = sum(f.stat().st_size for f in cv17.rglob("*") if f.is_file())
    assert total < 8 * 2**20


def test_strict_load_and_greedy_run(cv17):
    out = _synthesize(cv17, budget=12)
    assert [u.id for u in out] == ["r0", "r1"]
    for u in out:
        assert u.codes.shape == (11, 16) and u.hit_frame_budget  # budget 12 -> 11 frames
        assert u.codes.min() >= 0 and u.codes.max() < 2048
        assert u.audio.shape == (11 * 1920,) and np.isfinite(u.audio).all()
        assert 0.05 < float(u.audio.std()) < 0.9  # calibrated: audible, mostly unclipped
        # Not a dull model (a 0.1-std draw with seed 0 repeats one c0 from frame 3 on).
        assert len(set(u.codes[-8:, 0].tolist())) > 2
    assert not np.array_equal(out[0].codes, out[1].codes)


def test_deterministic_for_a_seed(cv17, tmp_path):
    same = make_tiny_checkpoint(tmp_path / "same", greedy=True, seed=0)
    other = make_tiny_checkpoint(tmp_path / "other", greedy=True, seed=1)
    for rel in ("model.safetensors", "speech_tokenizer/model.safetensors", "config.json"):
        assert (same / rel).read_bytes() == (cv17 / rel).read_bytes(), rel
    assert (other / "model.safetensors").read_bytes() != (cv17 / "model.safetensors").read_bytes()


def test_sizes_types_and_dims(tmp_path):
    d06 = make_tiny_checkpoint(tmp_path / "cv06", size="0b6", dtype="bfloat16")
    t06 = read_safetensors(d06)
    assert not any("small_to_mtp_projection" in k for k in t06)
    assert {t.dtype for t in t06.values()} == {torch.bfloat16}
    assert read_safetensors(d06 / "speech_tokenizer")["decoder.pre_conv.conv.weight"].dtype == (
        torch.float32
    )
    vd = make_tiny_checkpoint(tmp_path / "vd", model_type="voice_design", hidden=32, layers=3)
    cfg = ModelConfig.from_file(vd / "config.json")
    assert cfg.tts_model_type == "voice_design" and cfg.talker.spk_id == {}
    assert "sichuan_dialect" not in cfg.talker.codec_language_id
    t = read_safetensors(vd)
    assert t["talker.code_predictor.small_to_mtp_projection.weight"].shape == (16, 32)
    assert t["talker.model.layers.2.mlp.up_proj.weight"].shape == (32, 32)
    assert "talker.model.layers.3.mlp.up_proj.weight" not in t
    assert t["talker.code_predictor.model.codec_embedding.14.weight"].shape == (2048, 32)


@pytest.mark.parametrize(
    ("size", "dims", "message"),
    [
        ("0b6", {"predictor_hidden": 4}, "predictor_hidden == hidden"),
        ("1b7", {"predictor_hidden": 16}, "predictor_hidden != hidden"),
        ("1b7", {"heads": 3, "kv_heads": 2}, "divide by kv_heads"),
        ("1b7", {"width": 3}, "unknown dims"),
        ("2b", {}, "size must be"),
    ],
)
def test_bad_dims_are_refused(size, dims, message):
    with pytest.raises(ValueError, match=message):
        resolve_dims(size, **dims)


def test_bad_model_type_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="model_type"):
        make_tiny_checkpoint(tmp_path / "x", model_type="design_voice")
    with pytest.raises(ValueError, match="dtype"):
        make_tiny_checkpoint(tmp_path / "y", dtype="int8")
    assert list(tmp_path.iterdir()) == []


def test_bf16_loads_the_talker_and_the_decoder_in_bf16_once(cv17):
    """--dtype bfloat16 (auto on a CPU with bf16 units): every weight of both models lands in
    bf16 at load, the RoPE tables stay fp32 (angles in fp32, as the published code computes)."""
    from qtts.core.model.talker import RotaryEmbedding

    text = CheckpointText("tiny", cv17)
    model, decoder = load_weights(text.model_dir, text.config, torch.device("cpu"), torch.bfloat16)
    dtypes = {p.dtype for m in (model, decoder) for p in m.parameters()}
    assert dtypes == {torch.bfloat16}
    tables = [m.inv_freq for m in model.modules() if isinstance(m, RotaryEmbedding)]
    assert tables and all(t.dtype == torch.float32 for t in tables)
