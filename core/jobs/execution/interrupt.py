"""SIGINT/SIGTERM for a running job: stop taking work, flush, exit 130/143; a second signal exits at
once. Inside an interruptible section (a wait on the synthesizer or a model load, where nothing of
ours is half-written) the first raises Interrupted at once; elsewhere the job finishes its step (a
file, a journal line) and then sees the flag. Knows nothing of rows or models.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("qtts")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _exit_now(signum: int, frame: object) -> None:
    os._exit(128 + signum)


class Interrupted(BaseException):  # noqa: N818 -- BaseException so `except Exception` can't eat it
    """The job was asked to stop; exit code 128 + signal number (130 SIGINT, 143 SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopSignals:
    """Context manager installing the handlers (main thread only; elsewhere it does nothing)."""

    def __init__(self, on_exit_now: Callable[[], None] | None = None) -> None:
        self.signum: int | None = None
        self._on_exit_now = on_exit_now
        self._interruptible = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in _SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            # Stopping after a signal: a second one, while the process winds down (library
            # atexit hooks), exits at once instead of raising a traceback out of them.
            signal.signal(s, handler if self.signum is None else _exit_now)
        self._previous.clear()

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            if self._on_exit_now is not None:
                self._on_exit_now()
            os._exit(128 + signum)
        self.signum = signum
        log.warning(
            "%s received: finishing files in flight, then stopping (send it again to exit now)",
            signal.Signals(signum).name,
        )
        if self._interruptible:
            self._interruptible = False
            raise Interrupted(signum)

    def check(self) -> None:
        """Raise Interrupted if a signal has arrived."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """A section a signal may abort at once (nothing of ours is half-written inside it)."""
        self.check()
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False
