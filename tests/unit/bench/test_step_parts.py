"""`qtts bench`'s step split: parts timed inside the same steps add up to the step, nested parts
are not counted twice, and timing the parts changes nothing the step computes."""

import engines
import pytest
import torch

from qtts.core.bench import part_clock
from qtts.core.bench import step_parts as sp
from qtts.core.engine.loop import engine as engine_module

SPLIT_COVERAGE = 0.8  # least share of the step's wall time its parts must account for


class FakeClock:
    """perf_counter that only moves when a test says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_nested_part_counts_once(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(part_clock.time, "perf_counter", clock)
    parts = part_clock.PartClock(torch.device("cpu"), ["inner", "outer"])

    def inner():
        with parts.part("inner"):
            clock.now += 3.0

    with parts.part("outer"):
        clock.now += 2.0
        inner()
        with parts.part("untimed"):  # a part not asked for counts toward the one around it
            clock.now += 1.0
        inner()
    assert parts.totals == {"inner": 6.0, "outer": 3.0}  # 9 s of wall time, each second once


@pytest.mark.parametrize("path", ["module", "packed"])
def test_parts_add_up_and_leave_the_step_unchanged(tiny_gqa, path):
    tuning = engines.cpu_tuning(**engines.GPU_PATHS[path])
    timed = engines.prefilled(tiny_gqa, 3, 3, greedy=True, tuning=tuning)
    plain = engines.prefilled(tiny_gqa, 3, 3, greedy=True, tuning=tuning)
    original_choose = engine_module.choose_tokens

    parts = sp.step_parts(timed, 64, repeats=2)
    for _ in range(3):  # step_parts ran 1 warm-up + 2 timed steps
        plain.decode_step(64)

    assert set(parts) == {*sp.PARTS, "instrumented_step"}
    # The parts are timed inside the steps, the total around them on its own clock: they cover
    # it, less the loop's and the timer's own overhead.
    total, covered = parts["instrumented_step"], sum(parts[p] for p in sp.PARTS)
    assert SPLIT_COVERAGE * total <= covered <= total + 1e-3
    assert all(parts[p] > 0 for p in ("talker_stack", "predictor", "sampling"))
    assert parts["other"] >= 0
    assert torch.equal(timed.state.codes, plain.state.codes)  # greedy: token codes exact
    assert torch.equal(timed.state.num_tokens, plain.state.num_tokens)
    # nothing is left set or patched: the engine's timer, its methods and the sampler
    assert timed.timer is None and engine_module.choose_tokens is original_choose
    assert "_predict_codes" not in vars(timed) and not hasattr(timed.talker_step, "__wrapped__")
