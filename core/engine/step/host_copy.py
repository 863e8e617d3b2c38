"""Host -> device copies that never block the host: small int64 tables staged in pinned memory.

A plain `torch.tensor(list, device="cuda")` copies from pageable memory, which waits for the
device to drain everything queued before it; the decode loop would idle the GPU on every refill.
Staging the values in pinned (page-locked) memory makes the copy asynchronous, and packing many
small lists into one table makes it one copy. On CPU there is nothing to copy. Knows tensors only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch


def to_device(values: np.ndarray | Sequence[int], device: torch.device | str) -> torch.Tensor:
    """int64 [n] on `device`, by one non-blocking copy from pinned memory on CUDA."""
    host = torch.as_tensor(np.asarray(values, dtype=np.int64))  # [n]
    dev = torch.device(device)
    if dev.type == "cuda":
        # The caching host allocator keeps the pinned block alive until the copy has run.
        return host.pin_memory().to(dev, non_blocking=True)
    return host.to(dev)


def ids_to_device(
    pieces: Mapping[str, Sequence[int]], device: torch.device | str
) -> dict[str, torch.Tensor]:
    """Several id lists in one copy: name -> int64 [1, n] views of one device table."""
    lengths = [len(v) for v in pieces.values()]
    flat = np.fromiter((i for v in pieces.values() for i in v), np.int64, sum(lengths))
    table = to_device(flat, device)[None]  # [1, total]
    ends = np.cumsum(lengths)
    return {
        name: table[:, end - n : end] for name, n, end in zip(pieces, lengths, ends, strict=True)
    }
