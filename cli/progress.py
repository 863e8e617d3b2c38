"""Progress on stderr, by audio: a tqdm bar (audio seconds done of those planned, rows, audio-s/s,
ETA) when stderr is a terminal, otherwise a log line every --log-interval seconds from the
moment synthesis starts (cron logs see a heartbeat even before the first row finishes); nothing
with -q. Rows finish in bursts (a batch at a time), so the ETA counts audio, not rows; a long
row split into segments counts each segment's audio as it is made, so the ETA moves during a
row that takes minutes (the row's own count, when it finishes, replaces its segments'). Log
records go through the bar (tqdm.write), never into it. Never writes to stdout.

Implements qtts.core.jobs.contract.interfaces.ProgressSink; knows nothing of a job beyond rows and
seconds.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

log = logging.getLogger("qtts")

_bars = 0  # bars on screen: while any is, log records are written through tqdm


def _clock(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


class BarAwareHandler(logging.StreamHandler):
    """A stderr handler that prints above a progress bar instead of into it."""

    def emit(self, record: logging.LogRecord) -> None:
        if not _bars:
            super().emit(record)
            return
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 -- logging must not fail the job
            self.handleError(record)


class Progress:
    def __init__(self, *, quiet: bool = False, log_interval: float = 30.0) -> None:
        self.quiet = quiet
        self.log_interval = log_interval
        self.bar = None
        self.total = self.done = 0
        self.planned_s = self.audio_s = 0.0
        self.in_progress: dict[str, tuple[int, float]] = {}  # split row -> (segments, audio_s)
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self, total: int, planned_audio_s: float = 0.0) -> None:
        """total rows to synthesize, and the audio they are expected to make (an estimate)."""
        global _bars
        self.total, self.planned_s = total, planned_audio_s
        self.t0 = time.monotonic()
        if self.quiet or not total:
            return
        if _is_tty(sys.stderr):
            from tqdm import tqdm

            total = round(planned_audio_s, 1) or None  # None: not known before reading
            of_total = "/{total:.0f}" if total else ""
            self.bar = tqdm(
                total=total,
                unit="s audio",
                file=sys.stderr,
                dynamic_ncols=True,
                smoothing=0.1,
                bar_format="{l_bar}{bar}| {n:.0f}"
                + of_total
                + " s audio [{elapsed}<{remaining}{postfix}]",
            )
            _bars += 1
            self._postfix()
            return
        self._ticker = threading.Thread(target=self._tick, name="qtts-progress", daemon=True)
        self._ticker.start()

    def advance(self, rows: int, audio_s: float, row_id: str | None = None) -> None:
        """rows finished, making audio_s; row_id: the row, whose segments' audio it replaces."""
        self.done += rows
        _, counted = self.in_progress.pop(row_id, (0, 0.0)) if row_id is not None else (0, 0.0)
        self._add(audio_s - counted)

    def segment(self, row_id: str, audio_s: float) -> None:
        """A segment of split row `row_id`, not finished yet, made audio_s."""
        segments, counted = self.in_progress.get(row_id, (0, 0.0))
        self.in_progress[row_id] = (segments + 1, counted + audio_s)
        self._add(audio_s)

    def _add(self, audio_s: float) -> None:
        self.audio_s += audio_s
        if self.bar is not None:
            if self.bar.total is not None and self.bar.n + audio_s > self.bar.total:
                self.bar.total = self.bar.n + audio_s  # the estimate was short: never past 100%
            self.bar.update(audio_s)
            self._postfix()

    def _rows(self) -> str:
        """'2/7 rows', and the segments made of rows still going: '2/7 rows + 12 segments'."""
        # list(): one copy made in C, safe while the main thread adds and removes rows
        n = sum(segments for segments, _ in list(self.in_progress.values()))
        return f"{self.done}/{self.total} rows" + f" + {n} segment{'s' * (n != 1)}" * bool(n)

    def _postfix(self) -> None:
        elapsed = time.monotonic() - self.t0
        rate = self.audio_s / elapsed if elapsed > 0 else 0.0
        self.bar.set_postfix_str(f"{self._rows()}, {rate:.1f} audio-s/s", refresh=True)

    def _tick(self) -> None:
        while not self._stop.wait(self.log_interval):
            log.info(self.line())

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        rate = self.audio_s / elapsed if elapsed > 0 else 0.0
        left = max(self.planned_s - self.audio_s, 0.0)
        if self.done >= self.total:
            eta = "0:00:00"
        elif rate > 0 and left > 0:
            eta = _clock(left / rate)
        else:
            eta = "?"
        return (
            f"progress: {self._rows()}, {self.audio_s:.1f} of about "
            f"{self.planned_s:.0f} s of audio, {rate:.2f} audio-s/s, elapsed {_clock(elapsed)}, "
            f"ETA {eta}"
        )

    def close(self) -> None:
        global _bars
        self._stop.set()
        if self.bar is not None:
            self.bar.close()
            self.bar = None
            _bars -= 1


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
