"""One out-of-memory policy for every batched phase on the device, decode passes and vocoder
calls alike: halve the rows run at once and redo only what is unfinished (seeded draws and a
deterministic decoder make the redo produce what the failed attempt would have); the halved size
holds for the rest of the synthesize call (one chunk of rows); one row that still runs out of
memory is a real failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch

from qtts.core.engine.graphs import capture_broken

log = logging.getLogger("qtts")


class OomBackoff:
    """The rows one phase may run at once, halved on each out-of-memory error."""

    def __init__(
        self,
        size: int,
        *,
        what: str,
        device: torch.device,
        gate: AbstractContextManager | None = None,
        on_shrink: Callable[[int], None] | None = None,
    ) -> None:
        self.size = size
        self.what = what  # for the log: "slots", "vocoder rows"
        self.device = device
        # Freeing cached blocks while another thread captures a CUDA graph is an error: the
        # decode side frees under the device gate; the vocoder holds it around its own halving.
        self.gate = gate if gate is not None else nullcontext()
        self.on_shrink = on_shrink  # told the new size (the vocoder's graphs re-armed for it)

    def shrink(self, tried: int) -> bool:
        """After out of memory with `tried` rows at once: half as many from now on. False when
        `tried` was 1 (nothing smaller to try: the caller re-raises)."""
        if tried <= 1:
            return False
        self.size = tried // 2
        if self.on_shrink is not None:
            self.on_shrink(self.size)
        log.warning("out of memory: retrying the unfinished work with %d %s", self.size, self.what)
        return True

    def free(self) -> None:
        """Hand the failed attempt's cached blocks back. Call it outside the `except` block: the
        exception's traceback pins the attempt's tensors until the block ends."""
        with self.gate:
            _empty_cache(self.device)


def _empty_cache(device: torch.device) -> None:
    # After a failed capture the allocator may assert in empty_cache (engine.graphs): the retry
    # then runs on the memory the allocator already holds.
    if device.type == "cuda" and capture_broken() is None:
        torch.cuda.empty_cache()
