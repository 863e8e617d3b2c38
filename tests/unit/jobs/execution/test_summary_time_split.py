"""A run's time split (core/jobs/execution/summary.py): its parts add up to the command's
time whichever edges the run reached, and each part is the span between its own edges."""

from __future__ import annotations

import pytest

from qtts.core.jobs.execution.summary import RunEdges, time_split

PARTS = ("input_s", "scan_s", "load_s", "one_time_s", "decoding_s", "drain_s", "finish_s")


def _total(split: dict) -> float:
    return sum(split[k] or 0.0 for k in PARTS)


def test_a_run_that_decoded_splits_at_each_edge():
    edges = RunEdges(called=10.0, run=11.0, load=12.5, synthesis=16.0, last_step=40.0,
                     written=43.0)  # fmt: skip
    split = time_split(edges, end=45.0, one_time_s=3.0)
    assert split == {
        "input_s": 1.0,
        "scan_s": 1.5,
        "load_s": 3.5,
        "one_time_s": 3.0,
        "decoding_s": 21.0,  # 16 -> 40, less the 3 s of one-time work inside it
        "drain_s": 3.0,
        "finish_s": 2.0,
        "command_s": 35.0,
    }
    assert _total(split) == pytest.approx(split["command_s"])


def test_nothing_to_synthesize_is_input_and_scan_only():
    split = time_split(RunEdges(called=0.0, run=2.0), end=5.0)
    assert (split["input_s"], split["scan_s"], split["load_s"]) == (2.0, 3.0, 0.0)
    assert split["drain_s"] is None and split["decoding_s"] == 0.0 and split["finish_s"] == 0.0
    assert _total(split) == pytest.approx(split["command_s"]) == 5.0


def test_without_a_counted_step_the_synthesis_span_is_decoding():
    """A Ray run's decode steps are its actors': no last step here, no drain to tell apart."""
    edges = RunEdges(called=0.0, run=1.0, load=2.0, synthesis=4.0, written=14.0)
    split = time_split(edges, end=15.0)
    assert split["decoding_s"] == 10.0 and split["drain_s"] is None
    assert _total(split) == pytest.approx(split["command_s"]) == 15.0


def test_a_step_timestamp_outside_the_synthesis_span_is_clamped():
    """Clocks read on two threads: a last step stamped after the last write counts no drain,
    never a negative one."""
    edges = RunEdges(called=0.0, run=0.0, load=0.0, synthesis=1.0, last_step=9.5, written=9.0)
    split = time_split(edges, end=9.0)
    assert split["drain_s"] == 0.0 and split["decoding_s"] == 8.0
    assert _total(split) == pytest.approx(split["command_s"])
