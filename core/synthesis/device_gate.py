"""The device gate: who may put work on the GPU while a CUDA graph is captured or a pass's state
is built, with the decode side first.

Two threads share the device: the decode loop (which captures graphs, builds each pass's KV cache
and engine, and empties the allocator's cache after an out-of-memory) and the vocoder thread.
A capture must see no other thread's device work, so both hold the gate for those moments. The
decode side takes it as a context manager (`with gate:`) and goes first: while it waits, the
vocoder lets it in before its next micro-batch (`with gate.yielding():`), so a capture or a
build waits for one vocoder call at most, never behind a queue of groups (a plain Lock is not
FIFO, and the vocoder used to hold it for a whole group). The vocoder holds it per micro-batch,
not per group. Knows threads; no tensors.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class DeviceGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = False
        self._owner: int | None = None
        self._decode_waiting = 0

    def __enter__(self) -> DeviceGate:
        """The decode side: waits only for the vocoder call in flight."""
        with self._cond:
            self._refuse_nesting()
            self._decode_waiting += 1
            try:
                while self._held:
                    self._cond.wait()
            finally:
                self._decode_waiting -= 1
            self._held, self._owner = True, threading.get_ident()
        return self

    def __exit__(self, *exc) -> None:
        self._release()

    @contextmanager
    def yielding(self) -> Iterator[None]:
        """The vocoder side: waits while the decode side holds the gate or wants it."""
        with self._cond:
            self._refuse_nesting()
            while self._held or self._decode_waiting:
                self._cond.wait()
            self._held, self._owner = True, threading.get_ident()
        try:
            yield
        finally:
            self._release()

    def locked(self) -> bool:
        """Whether either side holds it now."""
        with self._cond:
            return self._held

    def _refuse_nesting(self) -> None:
        """Not re-entrant: a thread taking it again would wait for itself forever."""
        if self._held and self._owner == threading.get_ident():
            raise RuntimeError("the device gate is already held by this thread")

    def _release(self) -> None:
        with self._cond:
            self._held, self._owner = False, None
            self._cond.notify_all()
