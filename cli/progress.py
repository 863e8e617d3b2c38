"""Progress on stderr: a tqdm bar (rows, audio-s/s, ETA) when stderr is a terminal, otherwise a log
line every N seconds for cron logs; nothing with -q. Never writes to stdout.

Implements qtts.core.jobs.interfaces.ProgressSink; knows nothing of a job beyond rows and seconds.
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("qtts")


def _clock(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Progress:
    def __init__(self, *, quiet: bool = False, log_interval: float = 30.0) -> None:
        self.quiet = quiet
        self.log_interval = log_interval
        self.bar = None
        self.total = self.done = 0
        self.audio_s = 0.0
        self.t0 = self.last_log = time.monotonic()

    def start(self, total: int) -> None:
        self.total = total
        self.t0 = self.last_log = time.monotonic()
        if self.quiet or not total or not _is_tty(sys.stderr):
            return
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="row", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)

    def advance(self, rows: int, audio_s: float) -> None:
        self.done += rows
        self.audio_s += audio_s
        elapsed = time.monotonic() - self.t0
        rate = self.audio_s / elapsed if elapsed > 0 else 0.0
        if self.bar is not None:
            self.bar.set_postfix_str(f"{rate:.1f} audio-s/s", refresh=False)
            self.bar.update(rows)
            return
        now = time.monotonic()
        if not self.quiet and now - self.last_log >= self.log_interval:
            self.last_log = now
            log.info(self.line(elapsed, rate))

    def line(self, elapsed: float, rate: float) -> str:
        left = self.total - self.done
        eta = _clock(elapsed / self.done * left) if self.done else "?"
        return (
            f"progress: {self.done}/{self.total} rows, {self.audio_s:.1f} s of audio, "
            f"{rate:.2f} audio-s/s, elapsed {_clock(elapsed)}, ETA {eta}"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
