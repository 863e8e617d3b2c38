"""The frame estimate of a row the split settings cut, before its chunk cuts it: each of its
segments is held to the budget a segment gets, so a small --max-new-tokens bounds the estimate
(it was 4 frames per token of the whole text: 1,092 frames for 273 tokens, whatever the budget)."""

from __future__ import annotations

import fakes
import pyarrow as pa

from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.work.budget import FrameBudget, check_lengths

LONG = " ".join(["word"] * 273)  # the fake counts a token per word


def _estimate(budget: FrameBudget, split: SplitOptions | None = SplitOptions()) -> list[int]:
    texts = pa.array([LONG, "a short row"], pa.large_string())
    return check_lengths(texts, fakes.FakeTextModel("m"), budget, split).est_frames.tolist()


def test_a_small_budget_caps_each_segment():
    # at least ceil(273 / 50) = 6 segments of 20 steps each; the short row its own 20
    assert _estimate(FrameBudget(8192, explicit=20)) == [6 * 20, 4 * 3]
    longer = SplitOptions(max_segment_tokens=100)  # at least 3 segments
    assert _estimate(FrameBudget(8192, explicit=20), longer) == [3 * 20, 4 * 3]


def test_a_budget_that_does_not_bind_leaves_the_typical_delivery():
    assert _estimate(FrameBudget(8192)) == [4 * 273, 4 * 3]
    # a checkpoint allowing 200 frames: the text's 1,092 typical frames fit under 6 x 200
    assert _estimate(FrameBudget(200)) == [4 * 273, 4 * 3]
    assert _estimate(FrameBudget(100)) == [6 * 100, 4 * 3]
