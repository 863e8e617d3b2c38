"""Progress: a bar only on a terminal, periodic log lines otherwise, nothing with -q."""

from __future__ import annotations

import io
import logging

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


def test_log_lines_every_interval_when_not_a_tty(monkeypatch, caplog):
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    monkeypatch.setattr(progress_mod.sys, "stderr", io.StringIO())
    caplog.set_level(logging.INFO, logger="qtts")
    p = Progress(log_interval=30)
    p.start(10)
    clock.t += 10
    p.advance(1, 2.0)
    assert not caplog.records  # not yet 30 s
    clock.t += 30
    p.advance(1, 2.0)
    (rec,) = caplog.records
    assert "2/10 rows" in rec.message and "0.10 audio-s/s" in rec.message
    assert "ETA 0:02:40" in rec.message
    assert p.bar is None


def test_quiet_shows_nothing(monkeypatch, caplog):
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    monkeypatch.setattr(progress_mod.sys, "stderr", Tty())
    caplog.set_level(logging.INFO, logger="qtts")
    p = Progress(quiet=True, log_interval=1)
    p.start(5)
    clock.t += 100
    p.advance(1, 1.0)
    assert p.bar is None and not caplog.records


def test_bar_on_a_terminal(monkeypatch):
    tty = Tty()
    monkeypatch.setattr(progress_mod.sys, "stderr", tty)
    p = Progress()
    p.start(4)
    p.advance(2, 3.0)
    p.close()
    out = tty.getvalue()
    assert "2/4" in out and "audio-s/s" in out
