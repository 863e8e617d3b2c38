"""--on-budget retry in the synthesizer, on a tiny checkpoint whose EOS is aimed so that sampled
rows stop under some seeds and run to their budget under others.

The oracle is each try run on its own: try k of a row is the request with seed
attempt_seed(seed, k), synthesized without retries. With N tries allowed a row must come back as
its first try that stopped (codes, audio, that try's number and seed), or, when every try hit the
budget, as its N-th try, flagged. The same holds at another batch size and row order, and from
the naive generator. CPU fp32, sampling on.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from aimed_eos import aim_eos
from golden import AUDIO_ATOL

from qtts.core.synthesis.requests import GenerationOptions, Request, attempt_seed

TRIES = 3
BUDGET = 10  # max_new_tokens: 9 frames for a row that never stops
ROWS = 5


@pytest.fixture(scope="module")
def aimed():
    """(text model, synthesizer of 8 slots) with the EOS row of codec_head aimed."""
    from qtts.core.synthesis.requests import Placement
    from qtts.core.synthesis.session import load_synthesizer, open_text_model
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    ck = make_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", seed=3)
    text_model = open_text_model(str(ck))
    synth = load_synthesizer(text_model, Placement(device="cpu", dtype="float32", batch_size=8))
    aim_eos(synth, text_model, _requests(1), _options(text_model, 1))
    return text_model, synth


def _requests(n: int, tries: tuple[int, ...] = (1,)) -> list[Request]:
    """Row i (seed i); with several tries, one request per (row, try) seeded as that try."""
    return [Request(f"r{i}" if tries == (1,) else f"r{i}/{k}", f"Line number {i}.", i + 1,
                    "vivian", "english", None, seed=attempt_seed(i, k), max_new_tokens=BUDGET)
            for i in range(n) for k in tries]  # fmt: skip


def _options(text_model, tries: int) -> GenerationOptions:
    d = text_model.defaults
    assert d.talker.do_sample and d.subtalker.do_sample  # sampling on: the seed matters
    return GenerationOptions(d.talker, d.subtalker, max_attempts=tries)


def _run(synth, requests, options, **overrides) -> dict:
    saved = {k: getattr(synth, k) for k in overrides}
    try:
        for k, v in overrides.items():
            setattr(synth, k, v)
        return {u.id: u for u in synth.synthesize(requests, options)}
    finally:
        for k, v in saved.items():
            setattr(synth, k, v)


@pytest.fixture(scope="module")
def oracle(aimed) -> dict:
    """(row, try) -> that try alone: one call, no retries (codes are batch-invariant)."""
    text_model, synth = aimed
    out = _run(synth, _requests(ROWS, tuple(range(1, TRIES + 1))), _options(text_model, 1))
    return {(int(k[1:].split("/")[0]), int(k.split("/")[1])): u for k, u in out.items()}


@pytest.fixture(scope="module")
def retried(aimed) -> dict:
    text_model, synth = aimed
    return _run(synth, _requests(ROWS), _options(text_model, TRIES))


def _expected(oracle, row: int):
    """The try a row keeps: its first that stopped, else its last."""
    for k in range(1, TRIES + 1):
        if not oracle[row, k].hit_frame_budget:
            return k
    return TRIES


def test_a_row_keeps_its_first_try_that_stops_or_fails_after_all(oracle, retried):
    assert sorted(retried) == [f"r{i}" for i in range(ROWS)]
    kinds = set()
    for i in range(ROWS):
        k, got = _expected(oracle, i), retried[f"r{i}"]
        want = oracle[i, k]
        assert (got.attempts, got.seed) == (k, attempt_seed(i, k)), i
        assert got.hit_frame_budget == want.hit_frame_budget, i
        np.testing.assert_array_equal(got.codes, want.codes)
        np.testing.assert_allclose(got.audio, want.audio, rtol=0, atol=AUDIO_ATOL)
        kinds.add("stopped" if k == 1 else "failed" if want.hit_frame_budget else "retried")
        if want.hit_frame_budget:  # every try ran to the budget
            assert all(oracle[i, j].hit_frame_budget for j in range(1, TRIES + 1))
            assert len(got.codes) == BUDGET - 1
    # The aim must give all three kinds, or the test shows less than it claims.
    assert kinds == {"stopped", "retried", "failed"}


def test_retries_are_batch_invariant_and_the_naive_generator_agrees(aimed, retried):
    text_model, synth = aimed
    options = _options(text_model, TRIES)
    shuffled = list(reversed(_requests(ROWS)))
    for overrides in ({"batch_size": 3}, {"generator": "naive", "batch_size": 2}):
        got = _run(synth, shuffled, options, **overrides)
        assert sorted(got) == sorted(retried)
        for key, want in retried.items():
            g = got[key]
            assert (g.attempts, g.seed, g.hit_frame_budget) == (
                want.attempts, want.seed, want.hit_frame_budget), (overrides, key)  # fmt: skip
            np.testing.assert_array_equal(g.codes, want.codes)


def test_no_retry_when_neither_site_samples():
    sampled = GenerationOptions(_site(True), _site(False), max_attempts=TRIES)
    assert sampled.attempts == TRIES  # one sampling site is enough for another draw
    greedy = replace(sampled, talker=_site(False))
    assert greedy.attempts == 1  # another seed would give the same codes


def _site(sample: bool):
    from qtts.core.model.config import SamplingParams

    return SamplingParams(do_sample=sample)
