"""How many writer threads a local run gets: half the cores it may run on, 2 to 8."""

from __future__ import annotations

import os

import pytest

from qtts.core.jobs.output.stores import open_store
from qtts.core.jobs.output.stores.open_store import usable_cpus, writer_threads


@pytest.mark.parametrize(("cpus", "threads"), [(1, 2), (2, 2), (4, 2), (6, 3), (16, 8), (96, 8)])
def test_half_the_cores_within_bounds(cpus, threads):
    assert writer_threads(cpus) == threads


def test_the_process_affinity_counts_not_the_machine(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cpus() == 6 and writer_threads() == 3


def test_without_affinity_the_machines_cores(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    assert open_store.usable_cpus() == 12 and writer_threads() == 6
