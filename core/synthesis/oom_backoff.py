"""One out-of-memory policy for every batched phase on the device, decode passes and vocoder
calls alike: halve the rows run at once and redo only what is unfinished (seeded draws and a
deterministic decoder make the redo produce what the failed attempt would have); the halved size
holds for the rest of the synthesize call (one chunk of rows); one row that still runs out of
memory is a real failure.

The try/shrink/free loop is written once, here (`OomBackoff.tries`): a caller says what is left
to do and runs each try in a `with`; out of memory inside it halves the size, and the cached
blocks are handed back before the next try, once the exception (whose traceback pins the failed
try's tensors) is gone. `or_none` is the other use: a measurement that reports out of memory
instead of retrying (qtts bench). No other module catches torch.OutOfMemoryError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

import torch

from qtts.core.engine.loop.graphs import capture_broken

log = logging.getLogger("qtts")
T = TypeVar("T")


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

    def free(self, gate: Callable[[], AbstractContextManager] | None = None) -> None:
        """Hand the failed attempt's cached blocks back, holding gate() (default: this backoff's
        gate). Call it outside the `except` block: the exception's traceback pins the attempt's
        tensors until the block ends."""
        with gate() if gate is not None else self.gate:
            _empty_cache(self.device)

    def tries(
        self, more: Callable[[], bool], gate: Callable[[], AbstractContextManager] | None = None
    ) -> Iterator[Try]:
        """One Try per attempt while more() says work is left. Run each attempt inside
        `with the_try:`, after setting `the_try.rows` to the rows it runs at once (at most
        `the_try.size`); out of memory there halves the size (or re-raises at one row), and the
        cached blocks are freed, holding gate() (a context manager factory: the vocoder's
        yielding side of the device gate, say), before the next try."""
        while more():
            attempt = Try(self)
            yield attempt
            if attempt.failed:
                self.free(gate)


class Try:
    """One attempt of an OomBackoff loop: a context manager that turns out of memory into a
    halving (the exception swallowed, `failed` set) or re-raises it at one row."""

    def __init__(self, backoff: OomBackoff) -> None:
        self.backoff = backoff
        self.size = backoff.size  # the most rows this attempt may run at once
        self.rows = self.size  # what it runs: the caller may set fewer (the last rows left)
        self.failed = False

    def __enter__(self) -> Try:
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if kind is not None and issubclass(kind, torch.OutOfMemoryError):
            if self.backoff.shrink(self.rows):
                self.failed = True
                return True  # swallowed: the loop frees and tries again, smaller
        return False


def or_none(run: Callable[[], T], device: torch.device) -> T | None:
    """run(), or None when it runs out of device memory (its cached blocks handed back): for a
    measurement that reports the size as too large instead of retrying smaller."""
    try:
        return run()
    except torch.OutOfMemoryError:
        pass
    _empty_cache(device)  # after the except block: its traceback no longer pins the tensors
    return None


def _empty_cache(device: torch.device) -> None:
    # After a failed capture the allocator may assert in empty_cache (engine.graphs): the retry
    # then runs on the memory the allocator already holds.
    if device.type == "cuda" and capture_broken() is None:
        torch.cuda.empty_cache()
