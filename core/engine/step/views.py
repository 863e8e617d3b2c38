"""KV view lengths: how much of a static cache a decode step attends over.

Attention reads the first `view` positions of a slot's cache, a multiple of the tuning'
`view_bucket`, so a step's cost follows the longest live row instead of the cache size, and the
GPU captures one graph per possible view. Plain integers: the planner sizes graphs from these
without touching a tensor.
"""

from __future__ import annotations

# A slot's KV cache length is a multiple of this: CUDA's memory-efficient attention pads and
# slices a bias whose key count is not 16-aligned, on every layer of every step.
KV_ALIGN = 16


def aligned_kv_len(positions: int) -> int:
    """KV positions to allocate per slot for rows needing `positions`: rounded up to KV_ALIGN."""
    return -(-positions // KV_ALIGN) * KV_ALIGN


def view_length(bound: int, bucket: int, max_len: int) -> int:
    """Smallest multiple of `bucket` >= bound, capped at the cache length."""
    return min(max_len, -(-bound // bucket) * bucket)


def view_lengths(bucket: int, max_len: int) -> list[int]:
    """Every length view_length can return for this cache: the decode graphs to capture."""
    return [view_length(k * bucket, bucket, max_len) for k in range(1, -(-max_len // bucket) + 1)]
