"""The one out-of-memory policy of decode passes and vocoder calls (core/synthesis/oom_backoff.py):
halve what was tried, give up at one row, free the cache under the gate it was given."""

from __future__ import annotations

import threading

import torch

from qtts.core.synthesis import oom_backoff
from qtts.core.synthesis.oom_backoff import OomBackoff


def test_each_shrink_halves_what_was_tried_and_one_row_is_the_floor():
    backoff = OomBackoff(16, what="slots", device=torch.device("cpu"))
    assert backoff.shrink(16) and backoff.size == 8
    assert backoff.shrink(5) and backoff.size == 2  # the size tried, not the cap: a short group
    assert backoff.shrink(2) and backoff.size == 1
    assert not backoff.shrink(1) and backoff.size == 1  # nothing smaller: the caller re-raises


def test_free_empties_the_cache_holding_the_gate(monkeypatch):
    gate, held = threading.Lock(), []
    monkeypatch.setattr(oom_backoff, "_empty_cache", lambda device: held.append(gate.locked()))
    OomBackoff(4, what="slots", device=torch.device("cpu"), gate=gate).free()
    assert held == [True] and not gate.locked()
