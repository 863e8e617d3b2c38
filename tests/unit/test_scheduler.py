"""Scheduling policy: longest first, fixed batch size, stable ties."""

import pytest

from qtts.core.jobs.requests import Request
from qtts.core.jobs.scheduler import plan_batches


def _reqs(n):
    return [Request(id=f"r{i}", text="t", row=i + 1) for i in range(n)]


def test_longest_first_in_batches():
    reqs = _reqs(5)
    est = {"r0": 10, "r1": 50, "r2": 30, "r3": 50, "r4": 5}
    batches = plan_batches(reqs, est, batch_size=2)
    assert [[r.id for r in b] for b in batches] == [["r1", "r3"], ["r2", "r0"], ["r4"]]


def test_every_request_exactly_once():
    reqs = _reqs(37)
    est = {r.id: (i * 7) % 11 for i, r in enumerate(reqs)}
    batches = plan_batches(reqs, est, batch_size=8)
    assert [len(b) for b in batches] == [8, 8, 8, 8, 5]
    assert sorted(r.id for b in batches for r in b) == sorted(r.id for r in reqs)


def test_bad_inputs():
    with pytest.raises(ValueError, match="batch-size"):
        plan_batches(_reqs(1), {"r0": 1}, 0)
    with pytest.raises(ValueError, match="no frame estimate"):
        plan_batches(_reqs(2), {"r0": 1}, 4)
    assert plan_batches([], {}, 4) == []
