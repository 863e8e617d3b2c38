"""Progress during a long split row: the synthesizer wrapper reports each segment of a split row
(never a whole row, never a failure) and closes the real stream when closed early; the
progress then moves by those segments' audio (the ETA is known before the row ends), and the
row's own count replaces theirs when it finishes, or takes them back when it fails."""

from __future__ import annotations

import numpy as np
import pytest

from qtts.cli import progress as progress_mod
from qtts.cli.progress import Progress
from qtts.core.jobs.execution.local_backend import SegmentReporting, with_segment_progress
from qtts.core.jobs.long_text.segments import segment_id
from qtts.core.synthesis.requests import RowFailure, Utterance

RATE = 24_000


def utterance(request_id: str, seconds: float) -> Utterance:
    audio = np.zeros(round(seconds * RATE), dtype=np.float32)
    return Utterance(request_id, np.zeros((1, 16), np.int64), audio, RATE, False)


class Synth:
    def __init__(self, items) -> None:
        self.items, self.closed = items, False

    def synthesize(self, requests, options):
        try:
            yield from self.items
        finally:
            self.closed = True


class Calls:
    def __init__(self) -> None:
        self.segments: list[tuple[str, float]] = []

    def segment(self, row_id: str, audio_s: float) -> None:
        self.segments.append((row_id, round(audio_s, 3)))


def test_segments_of_split_rows_are_reported_as_they_come():
    items = [
        utterance("whole", 2.0),
        utterance(segment_id("long", 0), 1.5),
        RowFailure(segment_id("bad", 0), "no audio"),
        utterance(segment_id("long", 1), 0.5),
    ]
    calls = Calls()
    got = list(SegmentReporting(Synth(items), calls).synthesize([], None))
    assert got == items  # every item passes through, in order
    assert calls.segments == [("long", 1.5), ("long", 0.5)]


def test_closing_early_closes_the_real_stream():
    synth = Synth([utterance(segment_id("long", i), 1.0) for i in range(3)])
    stream = SegmentReporting(synth, Calls()).synthesize([], None)
    next(stream)
    stream.close()
    assert synth.closed


def test_no_progress_leaves_the_factory_as_it_is():
    def load(model, placement):
        return Synth([])

    assert with_segment_progress(load, None) is load
    assert isinstance(with_segment_progress(load, Calls())(None, None), SegmentReporting)


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", c)
    return c


def test_the_eta_moves_during_a_split_row(clock):
    p = Progress(log_interval=30)
    p.total, p.planned_s, p.t0 = 7, 100.0, clock.t
    clock.t += 10
    assert "0/7 rows, 0.0 of about 100 s" in p.line() and p.line().endswith("ETA ?")
    for _ in range(4):
        p.segment("long", 5.0)  # 20 s of audio in 10 s: 2 audio-s/s, 80 s left
    line = p.line()
    assert "0/7 rows + 4 segments, 20.0 of about 100 s of audio, 2.00 audio-s/s" in line
    assert line.endswith("ETA 0:00:40")
    p.advance(1, 20.6, "long")  # the row: its segments and the pauses between them
    assert p.audio_s == pytest.approx(20.6) and "1/7 rows, 20.6 of about" in p.line()


def test_a_failed_split_row_takes_its_segments_back(clock):
    p = Progress(log_interval=30)
    p.total, p.planned_s, p.t0 = 2, 10.0, clock.t
    p.segment("long", 3.0)
    p.segment("other", 1.0)
    p.advance(1, 0.0, "long")
    assert p.audio_s == pytest.approx(1.0) and "1/2 rows + 1 segment," in p.line()
    p.advance(1, 2.0)  # a whole row: no row_id needed
    assert p.audio_s == pytest.approx(3.0)
