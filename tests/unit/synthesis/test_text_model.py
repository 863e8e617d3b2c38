"""The checkpoint's text side as the job layer uses it: batched token counts equal the tokenizer's
own, the tokens-per-byte bound holds on hard text, the identity follows the files (not their
place), and the precision a job records."""

from __future__ import annotations

import shutil

import pytest

TEXTS = ["Hello world.", "", "  spaced  out  ", "日本語のテキストです。", "Ünïcödé ﬁ ligature",
         "emoji 😀👍🏽 mix", "\u0915\u093c\u0958 Devanagari nukta", "CJK compat \uf900\uf901",
         "a" * 300, "Mixed 中文 and English, with punctuation!?"]  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny", seed=3)


@pytest.fixture(scope="module")
def text_model(checkpoint):
    from qtts.core.synthesis.session import open_text_model

    return open_text_model(str(checkpoint))


def test_batched_counts_are_the_tokenizers_own(text_model):
    want = [len(text_model.tokenizer(t)["input_ids"]) for t in TEXTS]
    assert text_model.count_text_tokens(TEXTS) == want


def test_no_text_has_more_tokens_than_the_bound_allows(text_model):
    per_byte = text_model.max_tokens_per_byte
    assert per_byte == 3.0  # a byte-level BPE
    for text, n in zip(TEXTS, text_model.count_text_tokens(TEXTS), strict=True):
        assert n <= per_byte * len(text.encode()), text


def test_the_identity_follows_the_files_not_their_place(checkpoint, tmp_path):
    from qtts.core.model.hub import checkpoint_identity

    copy = tmp_path / "elsewhere"
    shutil.copytree(checkpoint, copy)
    assert checkpoint_identity(copy) == checkpoint_identity(checkpoint)
    (copy / "README.md").write_text("notes do not change the model")
    assert checkpoint_identity(copy) == checkpoint_identity(checkpoint)
    gen = copy / "generation_config.json"
    gen.write_text(gen.read_text().replace("0.9", "0.8", 1))
    assert checkpoint_identity(copy) != checkpoint_identity(checkpoint)


def test_a_changed_weight_header_changes_the_identity(checkpoint, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    from qtts.core.model.hub import checkpoint_identity

    copy = tmp_path / "retrained"
    shutil.copytree(checkpoint, copy)
    weights = load_file(copy / "model.safetensors")
    name = next(iter(weights))
    weights[name] = torch.cat([weights[name].flatten(), torch.zeros(1)])  # another shape
    save_file(weights, copy / "model.safetensors")
    assert checkpoint_identity(copy) != checkpoint_identity(checkpoint)


def test_the_precision_a_job_records(text_model):
    assert text_model.precision("cpu", "auto") == "cpu:float32"
    assert text_model.precision("cpu", "bfloat16") == "cpu:bfloat16"
