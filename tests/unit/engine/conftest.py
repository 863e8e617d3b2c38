"""Fixtures for the engine tests: CPU SDPA returning the layout CUDA's kernels return."""

import pytest
import torch.nn.functional as F


@pytest.fixture
def sdpa_bthd(monkeypatch):
    """SDPA returning the CUDA kernels' layout: same values, memory order [B, T, H, D]. Yields
    the list of calls made through it (so a test can show the patch was live)."""
    real = F.scaled_dot_product_attention
    calls = []

    def bthd(*args, **kwargs):
        out = real(*args, **kwargs)  # [B, H, T, D], contiguous on CPU
        calls.append(out.shape)
        return out.transpose(1, 2).contiguous().transpose(1, 2)  # same shape, BTHD in memory

    monkeypatch.setattr(F, "scaled_dot_product_attention", bthd)
    return calls
