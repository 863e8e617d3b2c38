"""GPU checks of the engine: CUDA-graph replay == eager, bf16 vs fp32, golden parity on CUDA.

Skipped without CUDA. Run them on the lent GPU machine: `python -m pytest -q tests/gpu`.
"""

import os

import numpy as np
import pytest
import torch

from qtts.core.requests import GenerationOptions, Request

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

TEXTS = [f"Row {i}: the quick brown fox jumps over the lazy dog." for i in range(12)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny_checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "small", preset="small", seed=1)


def _run(checkpoint, dtype: str, graphs: bool, greedy: bool = True, frames: int = 65):
    from qtts.core.config import SamplingParams
    from qtts.core.session import load_synthesizer, open_text_model

    os.environ["QTTS_CUDA_GRAPHS"] = "1" if graphs else "0"
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 for the comparisons
    torch.backends.cudnn.allow_tf32 = False
    text_model = open_text_model(str(checkpoint))
    synth = load_synthesizer(text_model, "cuda", dtype, 8)
    d = text_model.defaults
    talker = SamplingParams(not greedy, d.talker.temperature, d.talker.top_k, d.talker.top_p,
                            d.talker.repetition_penalty)  # fmt: skip
    sub = SamplingParams(not greedy, d.subtalker.temperature, d.subtalker.top_k, d.subtalker.top_p)
    reqs = [Request(f"r{i}", t, i + 1, "vivian", "english", None, seed=i, max_new_tokens=frames)
            for i, t in enumerate(TEXTS)]  # fmt: skip
    return {u.id: u.codes for u in synth.synthesize(reqs, GenerationOptions(talker, sub))}


def test_graph_replay_equals_eager_fp32(checkpoint):
    eager = _run(checkpoint, "float32", graphs=False)
    graphed = _run(checkpoint, "float32", graphs=True)
    for k in eager:
        np.testing.assert_array_equal(graphed[k], eager[k])


def test_graph_replay_equals_eager_sampled(checkpoint):
    eager = _run(checkpoint, "float32", graphs=False, greedy=False)
    graphed = _run(checkpoint, "float32", graphs=True, greedy=False)
    for k in eager:
        np.testing.assert_array_equal(graphed[k], eager[k])


def test_bf16_agrees_with_fp32_on_most_frames(checkpoint):
    """Greedy over 64 frames: bf16 drifts only rarely from the fp32 trajectory."""
    fp32 = _run(checkpoint, "float32", graphs=True)
    bf16 = _run(checkpoint, "bfloat16", graphs=True)
    same = total = 0
    for k in fp32:
        n = min(len(fp32[k]), len(bf16[k]), 64)
        same += int((fp32[k][:n, 0] == bf16[k][:n, 0]).sum())
        total += n
    assert same / total >= 0.99, f"{same}/{total} frames agree"


def test_golden_fixtures_on_cuda_fp32():
    import json

    from golden import GOLDEN as golden
    from golden import assert_matches_case, greedy_utterances

    from qtts.core.session import load_synthesizer, open_text_model

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for case in json.loads((golden / "cases.json").read_text()):
        text_model = open_text_model(str(golden / case["checkpoint"]))
        synth = load_synthesizer(text_model, "cuda", "float32", len(case["rows"]))
        reqs = []
        for i, row in enumerate(case["rows"]):
            spk, lang, ins, _ = text_model.normalize_row(row["speaker"], row["language"],
                                                         row["instruct"])  # fmt: skip
            reqs.append(Request(str(i), row["text"], i + 1, spk, lang, ins,
                                max_new_tokens=case["max_new_tokens"]))  # fmt: skip
        got = greedy_utterances(text_model, synth, reqs)
        want = np.load(golden / "cases" / f"{case['name']}.npz")
        # fp32, but GPU kernels sum in another order: audio to 1e-3.
        assert_matches_case(got, want, len(reqs), atol=1e-3)
