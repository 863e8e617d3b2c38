"""Tiny checkpoints made with stop_by_text (core/tiny/length_eos.py): rows end by EOS, greedy and
sampled, after ~RATE frames per text position of the prompt, within the automatic frame budget."""

from __future__ import annotations

import dataclasses
import json
import wave

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.model.weights import load_weights
from qtts.core.synthesis.prompt import (
    ROLE,
    TEXT,
    assistant_template,
    encode,
    instruct_template,
)
from qtts.core.synthesis.requests import GenerationOptions, Request
from qtts.core.synthesis.session import CheckpointText
from qtts.core.synthesis.synthesizer import Synthesizer
from qtts.core.tiny.checkpoint import make_tiny_checkpoint
from qtts.core.tiny.length_eos import RATE

TEXTS = (
    "Hi there.",
    "Hello there, this is a test.",
    "The quick brown fox jumps over the lazy dog, and then it runs away.",
)
# EOS must beat the top audio logit, so a row ends up to this many frames after RATE * U (U: the
# prompt's text positions); measured: 1 frame after it, greedy and sampled, at every preset.
FRAME_SLACK = 2
RATE_TOLERANCE = 0.1  # frames per extra text token, between the shortest and the longest row
# Frames per text token the construction aims at for texts of a dozen tokens and more (speech
# runs at ~0.83 frames per character, and the tiny tokenizer's tokens are 1-2 characters).
PER_TOKEN = (0.8, 1.3)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny ops: on a busy 2-core box each OpenMP handoff costs more than the math."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _ordinary(text_model: CheckpointText, ids: list[int]) -> int:
    config = text_model.config
    return sum(i not in (config.im_start_token_id, config.im_end_token_id) for i in ids)


def _text_positions(text_model: CheckpointText, text: str, instruct: str | None) -> int:
    """U: prompt positions whose text term is an ordinary text id: the role's, the text's and an
    instruction's (embedded whole)."""
    ids = encode(text_model.tokenizer, assistant_template(text))
    extra = encode(text_model.tokenizer, instruct_template(instruct)) if instruct else []
    return _ordinary(text_model, ids[ROLE] + ids[TEXT] + extra)


def _run(model_dir, do_sample: bool, instruct: str | None = None, ref_audio: str | None = None):
    """(text tokens, U, frames, hit budget) per text, with the job's automatic budget; a Base
    checkpoint clones `ref_audio` from its x-vector."""
    text_model = CheckpointText("eos-by-text", model_dir)
    model, decoder = load_weights(model_dir, text_model.config, torch.device("cpu"), torch.float32)
    synth = Synthesizer(text_model, model, decoder, torch.device("cpu"))
    talker, sub = text_model.defaults.talker, text_model.defaults.subtalker
    options = GenerationOptions(
        dataclasses.replace(talker, do_sample=do_sample),
        dataclasses.replace(sub, do_sample=do_sample),
    )
    budget = FrameBudget(cap=text_model.defaults.max_new_tokens)
    speaker = "vivian" if text_model.config.uses_speaker else None
    tokens = text_model.count_text_tokens(list(TEXTS))
    requests = [
        Request(f"r{i}", t, i + 1, speaker=speaker, instruct=instruct, seed=11 + i,
                ref_audio=ref_audio, max_new_tokens=budget.max_new_tokens(n))
        for i, (t, n) in enumerate(zip(TEXTS, tokens, strict=True))
    ]  # fmt: skip
    by_id = {u.id: u for u in synth.synthesize(requests, options)}
    return [
        (n, _text_positions(text_model, t, instruct), *_frames(by_id[f"r{i}"]))
        for i, (t, n) in enumerate(zip(TEXTS, tokens, strict=True))
    ]


def _frames(utterance) -> tuple[int, bool]:
    return utterance.codes.shape[0], utterance.hit_frame_budget


def _check(rows) -> None:
    frames = [f for _, _, f, _ in rows]
    assert not any(hit for *_, hit in rows), rows  # every row ended by EOS
    assert frames == sorted(frames) and frames[0] < frames[-1], rows
    for _, u, f, _ in rows:
        assert 0 <= f - RATE * u <= FRAME_SLACK, rows
    (n0, _, f0, _), (n1, _, f1, _) = rows[0], rows[-1]
    assert abs((f1 - f0) / (n1 - n0) - RATE) <= RATE_TOLERANCE, rows
    for n, _, f, _ in rows[1:]:
        assert PER_TOKEN[0] <= f / n <= PER_TOKEN[1], rows


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_rows_end_by_eos_at_a_length_set_by_the_text(tmp_path, preset, do_sample):
    model_dir = make_tiny_checkpoint(tmp_path / preset, preset=preset, stop_by_text=True)
    _check(_run(model_dir, do_sample))


def test_the_0b6_layout_and_voice_design_instructions(tmp_path):
    """Predictor as wide as the talker (0.6B); an instruction's text positions count too."""
    cv06 = make_tiny_checkpoint(tmp_path / "cv06", size="0b6", stop_by_text=True)
    _check(_run(cv06, do_sample=True))
    vd = make_tiny_checkpoint(tmp_path / "vd", model_type="voice_design", stop_by_text=True)
    rows = _run(vd, do_sample=False, instruct="A calm voice.")
    assert not any(hit for *_, hit in rows)
    assert all(0 <= f - RATE * u <= FRAME_SLACK for _, u, f, _ in rows), rows


def _tone(path) -> str:
    """A 1.5 s, 180 Hz reference clip (16-bit, 24 kHz)."""
    tone = 0.3 * np.sin(2 * np.pi * 180 * np.arange(36000) / 24000)  # [samples]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes((tone * 32767).astype("<i2").tobytes())
    return str(path)


def test_voice_clone_rows_end_alike(tmp_path):
    """The streaming layout (the text trailing one token a frame) ends rows as the non-streaming
    one does."""
    base = make_tiny_checkpoint(tmp_path / "base", model_type="base", stop_by_text=True)
    _check(_run(base, do_sample=True, ref_audio=_tone(tmp_path / "ref.wav")))


def test_qtts_batch_ends_rows_by_eos_without_max_new_tokens(tmp_path):
    """The README's job on such a checkpoint: no --max-new-tokens, every row ends by EOS."""
    cv = make_tiny_checkpoint(tmp_path / "cv", stop_by_text=True)
    texts = TEXTS[:2]  # the job sets its own threads: two short rows keep it quick on 2 busy cores
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"id": f"r{i}", "text": t, "speaker": "vivian"}) + "\n"
                for i, t in enumerate(texts))
    )  # fmt: skip
    out = tmp_path / "out"
    args = ["batch", str(rows), "--model", str(cv), "--device", "cpu", "--dtype", "float32",
            "--out-dir", str(out), "-q"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    table = pq.read_table(out / "results.parquet").to_pydict()
    assert not any(table["hit_frame_budget"]), table
    frames = dict(zip(table["id"], table["num_frames"], strict=True))
    text_model = CheckpointText("cv", cv)
    for i, t in enumerate(texts):
        assert 0 <= frames[f"r{i}"] - RATE * _text_positions(text_model, t, None) <= FRAME_SLACK


def test_the_option_changes_only_the_talker_weights(tmp_path):
    plain = make_tiny_checkpoint(tmp_path / "plain")
    aimed = make_tiny_checkpoint(tmp_path / "aimed", stop_by_text=True)
    same = ["config.json", "generation_config.json", "vocab.json", "speech_tokenizer/config.json"]
    for rel in [*same, "speech_tokenizer/model.safetensors"]:
        assert (plain / rel).read_bytes() == (aimed / rel).read_bytes(), rel
    assert (plain / "model.safetensors").read_bytes() != (aimed / "model.safetensors").read_bytes()
