"""Static KV caches for the engine: fixed buffers updated by index, so a decode step never
allocates.

The talker cache holds one row per slot, [layers, slots, kv_heads, max_len, head_dim], and per-slot
lengths on the device. A slot is prefilled alone (its prompt at positions 0..L-1, exactly the
official single-request computation) or with others in one padded pass (each batch row writes
its own slot's row); a decode step writes each slot's new key at its own length and
attends over a length-bucketed view with a per-slot mask, never over the whole max_len buffer. The
predictor cache is tiny and positional (16 positions per frame), so static slices need no mask.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class TalkerKVCache:
    def __init__(
        self,
        num_layers: int,
        slots: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device,
    ):
        shape = (num_layers, slots, kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # [Ly, B, Hk, T, D]
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = torch.zeros(slots, dtype=torch.long, device=device)  # positions held
        self.rows = torch.arange(slots, device=device)  # [B]
        self.max_len = max_len

    def prefill_writer(self, slots: torch.Tensor) -> _SlotPrefill:
        return _SlotPrefill(self, slots)

    def decode_view(self, view_len: int, attend: Callable | None = None) -> _DecodeView:
        """A view of the first view_len positions; `attend` replaces the model's attention."""
        return _DecodeView(self, view_len, attend)

    def decode_mask(self, view_len: int) -> torch.Tensor:
        """bool [B, 1, 1, S]: each slot sees its own positions 0..length (the new one included)."""
        span = torch.arange(view_len, device=self.lengths.device)
        return (span[None, :] <= self.lengths[:, None])[:, None, None, :]


class _SlotPrefill:
    """Writes prompts' K/V into their slots at positions [0, L) and attends over exactly those.
    Rows of a padded batch also write their padding; decode masks and then overwrites it."""

    def __init__(self, cache: TalkerKVCache, slots: torch.Tensor):
        self.cache, self.slots = cache, slots  # slots: int64 [m]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        n = k.shape[2]  # k/v [m, Hk, L, D]
        if n > self.cache.max_len:
            raise ValueError(f"prompt of {n} positions exceeds the cache ({self.cache.max_len})")
        self.cache.k[layer, self.slots, :, :n] = k
        self.cache.v[layer, self.slots, :, :n] = v
        return k, v

    def fused_rows(self, positions: int):
        """For the fused stack's prefill (engine.fused_stack), whose cache op writes each batch
        row's K/V into its slot's row itself: (k, v [Ly, slots, Hk, max_len, D], slots [m])."""
        if positions > self.cache.max_len:
            raise ValueError(
                f"prompt of {positions} positions exceeds the cache ({self.cache.max_len})"
            )
        return self.cache.k, self.cache.v, self.slots


class _DecodeView:
    """Writes each slot's new K/V at its own length; returns the first `view_len` positions."""

    def __init__(self, cache: TalkerKVCache, view_len: int, attend: Callable | None):
        self.cache, self.view_len = cache, view_len
        if attend is not None:
            self.attend = attend  # picked up by the model's Attention (KVCache protocol)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        c = self.cache  # k/v [B, Hk, 1, D]
        c.k[layer, c.rows, :, c.lengths] = k[:, :, 0]  # index_put: graph-safe, no host sync
        c.v[layer, c.rows, :, c.lengths] = v[:, :, 0]
        return c.k[layer, :, :, : self.view_len], c.v[layer, :, :, : self.view_len]

    def fused_targets(self, new_tokens: int):
        """For the fused stack (engine.fused_stack), which writes K/V itself at each slot's
        position: (k, v [Ly, B, Hk, max_len, D], positions to attend)."""
        return self.cache.k, self.cache.v, self.view_len


class PredictorKVCache:
    """[layers, B, Hk, positions, D]; frame-local positions 0..G-1, written by static slices. Each
    forward writes at `start` and advances it after its last layer; set start = 0 per frame."""

    def __init__(
        self,
        num_layers: int,
        slots: int,
        kv_heads: int,
        positions: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device,
    ):
        shape = (num_layers, slots, kv_heads, positions, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.num_layers = num_layers
        self.start = 0  # first position the next forward writes (a Python int: static per step)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        start, end = self.start, self.start + k.shape[2]
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        if layer == self.num_layers - 1:
            self.start = end  # this forward is done; the next one writes after it
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def fused_targets(self, new_tokens: int):
        """As update() for every layer at once, for the fused stack (which writes K/V itself at
        the tokens' positions, start..end-1): (k, v [Ly, B, Hk, P, D], positions to attend)."""
        end = self.start + new_tokens
        self.start = end
        return self.k, self.v, end
