"""The store tests' fixtures: `pair`, a two-part test format in the registry for one test."""

from __future__ import annotations

import pytest
from pair_format import register

from qtts.core.jobs.output.stores import registry


@pytest.fixture
def pair(monkeypatch):
    yield register(monkeypatch)
    registry.formats.cache_clear()  # then monkeypatch restores discover
