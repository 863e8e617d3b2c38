"""Frame budget: explicit --max-new-tokens exact, runaway guard, too-long check."""

import pytest

from qtts.core.jobs.work.budget import GUARD_BASE_FRAMES, GUARD_FRAMES_PER_TOKEN, FrameBudget


def test_explicit_is_used_exactly():
    b = FrameBudget(cap=8192, explicit=10)
    assert b.max_new_tokens(1) == 10 and b.max_new_tokens(10_000) == 10
    assert b.too_long(10_000) is None


def test_guard_grows_with_text_and_stops_at_the_cap():
    b = FrameBudget(cap=8192)
    assert b.max_new_tokens(0) == GUARD_BASE_FRAMES
    assert b.max_new_tokens(10) == GUARD_BASE_FRAMES + 10 * GUARD_FRAMES_PER_TOKEN
    assert b.max_new_tokens(5000) == 8192


def test_too_long_for_the_checkpoint_budget():
    b = FrameBudget(cap=100)
    assert b.too_long(10) is None
    msg = b.too_long(1000)
    assert "text too long for the frame budget" in msg and "1000 text tokens" in msg


def test_estimate_never_exceeds_the_budget():
    b = FrameBudget(cap=8192, explicit=5)
    assert b.estimate_frames(100) == 5
    assert FrameBudget(8192).estimate_frames(10) < FrameBudget(8192).estimate_frames(20)


@pytest.mark.parametrize("cap, explicit", [(8192, 0), (0, None)])
def test_nonsense_budgets_are_refused(cap, explicit):
    with pytest.raises(ValueError, match="must be >= 1"):
        FrameBudget(cap=cap, explicit=explicit)


def test_longest_first_keeps_input_order_on_ties_and_every_row_once():
    import numpy as np
    import pyarrow as pa

    from qtts.core.jobs.work.chunks import Todo

    rows = pa.table({"row": [1, 2, 3, 4, 5], "id": ["r0", "r1", "r2", "r3", "r4"]})
    todo = Todo.of(rows, np.array([10, 50, 30, 50, 5]))
    assert todo.ordered(["id"])["id"].to_pylist() == ["r1", "r3", "r2", "r0", "r4"]
    assert todo.est_frames.tolist() == [50, 50, 30, 10, 5]
    assert [t["id"].to_pylist() for t in todo.slices(2)] == [["r1", "r3"], ["r2", "r0"], ["r4"]]


def test_prompt_and_budget_must_fit_the_model_positions():
    import numpy as np

    b = FrameBudget(cap=8192, explicit=8, max_positions=32768)
    assert b.too_long(100) is None
    msg = b.too_long(60_000)  # an explicit budget no longer switches the check off
    assert "need about 60024 positions, the model has 32768" in msg
    tokens = np.array([1, 100, 32_744, 32_745, 60_000])
    assert b.too_long_mask(tokens).tolist() == [b.too_long(int(t)) is not None for t in tokens]
    implicit = FrameBudget(cap=40_000, max_positions=32768)
    assert implicit.too_long_mask(np.array([5000])).tolist() == [True]  # 5000+16+40000
