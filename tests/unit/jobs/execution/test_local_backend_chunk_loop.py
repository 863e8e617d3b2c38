"""The chunk loop both backends run (local and each Ray actor): every row gets an outcome, an id
nobody asked for stops the job, and the synthesizer's stream is closed however the loop ends."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from qtts.core.jobs.execution import local_backend
from qtts.core.jobs.execution.local_backend import run_chunk
from qtts.core.jobs.output.recorder import Outcome
from qtts.core.synthesis.requests import RowFailure

ROWS = {"a": {"id": "a"}, "b": {"id": "b"}, "c": {"id": "c"}}
CHUNK = SimpleNamespace(rows=ROWS, budgets=[("a", 10), ("b", 10), ("c", 10)])


class Recorder:
    ctx = SimpleNamespace(on_budget="ok")

    def finish(self, item, row, budget):
        return Outcome(row["id"], "ok" if not isinstance(item, RowFailure) else "failed")

    def failed(self, row, error):
        return Outcome(row["id"], "failed", error=error)


def _stream(monkeypatch, ids: list[str]) -> dict:
    state = {"closed": False}

    def synthesize_chunk(synth, chunk, options, on_budget):
        try:
            for i in ids:
                yield SimpleNamespace(id=i)
        finally:
            state["closed"] = True

    monkeypatch.setattr(local_backend, "synthesize_chunk", synthesize_chunk)
    return state


def test_a_row_never_returned_is_failed_with_a_reason(monkeypatch):
    state = _stream(monkeypatch, ["b", "a"])
    out = list(run_chunk(None, CHUNK, None, Recorder()))
    assert [(o.id, o.status) for o in out] == [("b", "ok"), ("a", "ok"), ("c", "failed")]
    assert out[-1].error == "the synthesizer returned no result" and state["closed"]


def test_an_unexpected_id_stops_the_job_and_closes_the_stream(monkeypatch):
    state = _stream(monkeypatch, ["a", "zz", "b"])
    with pytest.raises(RuntimeError, match="unexpected id 'zz'"):
        list(run_chunk(None, CHUNK, None, Recorder()))
    assert state["closed"]


def test_a_row_returned_twice_is_unexpected_the_second_time(monkeypatch):
    _stream(monkeypatch, ["a", "a"])
    with pytest.raises(RuntimeError, match="unexpected id 'a'"):
        list(run_chunk(None, CHUNK, None, Recorder()))


def test_each_wait_runs_in_the_guard_and_closing_early_closes_the_stream(monkeypatch):
    state = _stream(monkeypatch, ["a", "b", "c"])
    entered = []

    @contextmanager
    def guard():
        entered.append(True)
        yield

    loop = run_chunk(None, CHUNK, None, Recorder(), guard=guard)
    assert next(loop).id == "a" and len(entered) == 1
    loop.close()  # an abort or a signal between rows
    assert state["closed"]
