"""Greedy codes and audio vs the official qwen-tts, on tiny checkpoints it built (tools/oracle).

Each case is one official call (single row or a batch); we run the same rows as one batch through
the library path the CLI uses (open_text_model -> synthesizer) on CPU in fp32.
"""

import numpy as np
import pytest
from golden import GOLDEN, assert_matches_case, golden_cases, greedy_utterances

from qtts.core.synthesis.requests import Request


def _cases() -> list[dict]:
    return golden_cases("cases.json")


@pytest.fixture(scope="module")
def synthesizers():
    from qtts.core.synthesis.requests import Placement
    from qtts.core.synthesis.session import load_synthesizer, open_text_model

    cache = {}

    def get(name: str, generator: str):
        if (name, generator) not in cache:
            text_model = open_text_model(str(GOLDEN / name))
            synth = load_synthesizer(text_model, Placement(device="cpu", dtype="float32"))
            synth.generator = "naive" if generator == "naive" else "engine"
            cache[name, generator] = (text_model, synth)
        return cache[name, generator]

    return get


def _requests(text_model, case: dict) -> list[Request]:
    out = []
    for i, row in enumerate(case["rows"]):
        spk, lang, ins, _ = text_model.normalize_row(
            row.get("speaker"), row.get("language"), row.get("instruct")
        )
        out.append(
            Request(
                id=str(i),
                text=row["text"],
                row=i + 1,
                speaker=spk,
                language=lang,
                instruct=ins,
                max_new_tokens=case["max_new_tokens"],
            )
        )
    return out


@pytest.mark.parametrize("generator", ["engine", "engine-fused", "naive"])
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_codes_and_audio_match_official(case, generator, synthesizers, monkeypatch):
    """The naive generator runs the rows as one padded batch (as the official call did); the
    engine runs them in as many slots, each prefilled alone: on the CPU's packed path, and on
    the GPU's fused layer ops through their torch twins (QTTS_LAYER_PATH=fused)."""
    monkeypatch.setenv("QTTS_LAYER_PATH", "fused" if generator == "engine-fused" else "packed")
    text_model, synth = synthesizers(case["checkpoint"], generator)
    synth.batch_size = len(case["rows"])
    requests = _requests(text_model, case)
    got = greedy_utterances(text_model, synth, requests)
    assert_matches_case(got, np.load(GOLDEN / "cases" / f"{case['name']}.npz"), len(requests))


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_tokenization_matches_official(case, synthesizers):
    from qtts.core.synthesis.prompt import assistant_template, encode, instruct_template

    text_model, _ = synthesizers(case["checkpoint"], "naive")
    for i, row in enumerate(case["rows"]):
        got = encode(text_model.tokenizer, assistant_template(row["text"]))
        assert got == case["input_ids"][i], f"row {i}"
        want_ins = case.get("instruct_ids", [None] * len(case["rows"]))[i]
        if want_ins is not None:
            assert encode(text_model.tokenizer, instruct_template(row["instruct"])) == want_ins
