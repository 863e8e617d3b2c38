"""Scheduling policy: which requests go into which batch, in what order.

Sorts requests by estimated frames, longest first (an out-of-memory batch shows up at the start of a
night, not at the end, and the ETA errs on the safe side), and cuts them into batches of at most
batch_size so rows in a batch finish at similar steps. Policy only: sees requests and numbers,
never tensors, files or models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from qtts.core.jobs.requests import Request


def plan_batches(
    requests: Sequence[Request], estimated_frames: Mapping[str, int], batch_size: int
) -> list[list[Request]]:
    """Batches of <= batch_size requests, longest estimate first; ties keep input order."""
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    missing = [r.id for r in requests if r.id not in estimated_frames]
    if missing:
        raise ValueError(f"no frame estimate for request(s) {', '.join(missing[:5])}")
    order = sorted(requests, key=lambda r: (-estimated_frames[r.id], r.row))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
