"""Fixtures for the unit tests: tiny in-memory random models (tests/tiny_models.py)."""

import pytest
from tiny_models import tiny_model


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """(config, model, tokenizer) with random weights, std 0.1."""
    return tiny_model(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_gqa(tmp_path_factory):
    """As `tiny`, with 4 query heads over 2 KV heads (the real models have 16 over 8): layouts
    that merge or split the KV-head axis only break with more than one KV head."""
    return tiny_model(tmp_path_factory, heads=4, kv_heads=2)
