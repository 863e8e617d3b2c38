"""Progress: a bar by audio on a terminal (log lines above it), a heartbeat log line otherwise,
nothing with -q."""

from __future__ import annotations

import io
import logging
import time

from qtts.cli import progress as progress_mod
from qtts.cli.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_log_line_counts_audio_not_rows(monkeypatch):
    """Rows finish in bursts; the ETA comes from the audio made against the audio planned."""
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    p = Progress(log_interval=30)
    p.total, p.planned_s, p.t0 = 10, 100.0, clock.t
    clock.t += 40
    p.advance(2, 20.0)  # 20 s of audio in 40 s: 0.5 audio-s/s, 80 s of audio left
    line = p.line()
    assert "2/10 rows, 20.0 of about 100 s of audio, 0.50 audio-s/s" in line
    assert "ETA 0:02:40" in line


def test_log_lines_come_every_interval_from_the_start_when_not_a_tty(monkeypatch, caplog):
    monkeypatch.setattr(progress_mod.sys, "stderr", io.StringIO())
    caplog.set_level(logging.INFO, logger="qtts")
    p = Progress(log_interval=0.05)
    p.start(10, 50.0)
    time.sleep(0.3)  # no row has finished: the heartbeat logs anyway
    p.close()
    lines = [r.message for r in caplog.records if r.message.startswith("progress:")]
    assert len(lines) >= 2 and "0/10 rows" in lines[0] and p.bar is None


def test_quiet_shows_nothing(monkeypatch, caplog):
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    monkeypatch.setattr(progress_mod.sys, "stderr", Tty())
    caplog.set_level(logging.INFO, logger="qtts")
    p = Progress(quiet=True, log_interval=1)
    p.start(5, 10.0)
    clock.t += 100
    p.advance(1, 1.0)
    assert p.bar is None and not caplog.records


def test_bar_on_a_terminal_with_log_lines_above_it(monkeypatch):
    tty = Tty()
    monkeypatch.setattr(progress_mod.sys, "stderr", tty)
    handler = progress_mod.BarAwareHandler(tty)
    logger = logging.getLogger("qtts.test-progress")
    logger.addHandler(handler)
    try:
        p = Progress()
        p.start(4, 12.0)
        p.advance(2, 3.0)
        logger.warning("memory plan: 4 slots")
        p.close()
    finally:
        logger.removeHandler(handler)
    out = tty.getvalue()
    assert "2/4 rows" in out and "audio-s/s" in out and "3/12 s audio" in out
    assert "\nmemory plan: 4 slots\n" in out.replace("\r", "\n")  # a line of its own
