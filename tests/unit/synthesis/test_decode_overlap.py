"""The vocoder overlap: results in hand-over order, bounded queue, errors surface, work overlaps."""

import threading
import time

import pytest
import torch

from qtts.core.synthesis.decode_overlap import overlapped
from qtts.core.synthesis.device_gate import DeviceGate

CPU = torch.device("cpu")


def test_results_keep_hand_over_order_despite_uneven_work():
    def work(g):
        time.sleep(0.02 if g % 2 == 0 else 0.0)
        return g * 10

    assert list(overlapped(range(8), work, CPU)) == [g * 10 for g in range(8)]


def test_work_runs_beside_the_producer_on_another_thread():
    seen = []

    out = list(
        overlapped(iter(range(3)), lambda g: seen.append(threading.current_thread().name), CPU)
    )
    assert len(out) == 3 and all(name.startswith("qtts-vocoder") for name in seen)


def test_queue_is_bounded():
    produced, started = [], threading.Event()

    def producer():
        for g in range(20):
            produced.append(g)
            yield g

    def slow(g):
        started.set()
        time.sleep(0.01)
        return g

    gen = overlapped(producer(), slow, CPU, max_pending=2)
    first = next(gen)
    assert first == 0 and len(produced) <= 4  # the producer waited for the consumer
    assert list(gen) == list(range(1, 20))


def test_worker_errors_reach_the_caller():
    def work(g):
        if g == 2:
            raise RuntimeError("decoder failed")
        return g

    with pytest.raises(RuntimeError, match="decoder failed"):
        list(overlapped(range(5), work, CPU))


def test_the_worker_drops_a_group_while_it_holds_the_gate():
    """A group's device tensors are freed by the worker inside the gate, never after it: a free
    outside could land in a CUDA graph capture that the producer runs holding the gate."""
    freed = []

    gate = DeviceGate()

    class Group:  # stands in for a group of finished rows holding device tensors
        def __init__(self, i):
            self.i = i

        def __del__(self):
            freed.append((self.i, gate.locked(), threading.current_thread().name[:12]))

    out = list(overlapped((Group(i) for i in range(4)), lambda g: g.i, CPU, gate=gate))
    assert out == [0, 1, 2, 3]
    assert sorted(freed) == [(i, True, "qtts-vocoder") for i in range(4)]


def test_inline_runs_each_group_on_the_producer_thread_in_order():
    """inline (a CPU's serial budget): no worker thread; each group's work runs as it arrives, so
    the producer does not take the next group until the previous one's result is consumed."""
    events = []

    def producer():
        for g in range(3):
            events.append(f"made {g}")
            yield g

    def work(g):
        events.append(f"work {g} on {threading.current_thread().name}")
        return g * 10

    out = []
    for r in overlapped(producer(), work, CPU, inline=True):
        out.append(r)
        events.append(f"got {r}")
    me = threading.current_thread().name
    assert out == [0, 10, 20]
    assert events == [e for g in range(3) for e in (f"made {g}", f"work {g} on {me}",
                                                     f"got {g * 10}")]  # fmt: skip


class _FakeStream:
    """Stands in for a CUDA stream on a CPU: records the waits the caller's stream makes."""

    def __init__(self, name, log):
        self.name, self.log, self.device = name, log, CPU

    def wait_stream(self, other):
        self.log.append(f"{self.name} waits {other.name}")


def test_prioritized_produces_on_its_stream_and_hands_over_after_a_wait(monkeypatch):
    """The producer's code runs with the decode stream current, the caller's never does, and the
    caller's stream waits for the decode stream before each item and at the end."""
    import contextlib

    import qtts.core.synthesis.decode_overlap as overlap

    log, current = [], ["caller"]
    caller, decode = _FakeStream("caller", log), _FakeStream("decode", log)

    @contextlib.contextmanager
    def on(stream):
        current.append(stream.name)
        try:
            yield
        finally:
            current.pop()

    monkeypatch.setattr(torch.cuda, "stream", on)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: caller)

    def produce():
        for i in range(2):
            log.append(f"produce {i} on {current[-1]}")
            yield i

    for item in overlap.prioritized(produce(), decode):
        log.append(f"use {item} on {current[-1]}")
    assert log == [
        "decode waits caller", "produce 0 on decode", "caller waits decode", "use 0 on caller",
        "decode waits caller", "produce 1 on decode", "caller waits decode", "use 1 on caller",
        "decode waits caller", "caller waits decode",
    ]  # fmt: skip


def test_an_early_stop_closes_the_producer_on_its_stream(monkeypatch):
    import contextlib

    import qtts.core.synthesis.decode_overlap as overlap

    log, current = [], ["caller"]
    caller, decode = _FakeStream("caller", log), _FakeStream("decode", log)

    @contextlib.contextmanager
    def on(stream):
        current.append(stream.name)
        try:
            yield
        finally:
            current.pop()

    monkeypatch.setattr(torch.cuda, "stream", on)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: caller)

    def produce():
        try:
            yield from range(5)
        finally:
            log.append(f"producer closed on {current[-1]}")

    items = overlap.prioritized(produce(), decode)
    assert next(items) == 0
    items.close()
    assert log[-1] == "producer closed on decode"


def test_prioritized_without_a_stream_passes_items_through():
    from qtts.core.synthesis.decode_overlap import prioritized

    assert list(prioritized(iter(range(3)), None)) == [0, 1, 2]


def test_the_clock_counts_the_producers_waits_on_the_worker():
    """A worker slower than the producer: with one group in flight the producer blocks behind it
    while groups remain (waited_s), then for the last one (tail_s); a worker that never holds it
    up leaves both near zero. Bounds from the worker's sleeps, not a speed claim."""
    from qtts.core.synthesis.synthesis_clock import SynthesisClock

    slow = SynthesisClock()
    work = lambda g: time.sleep(0.05) or g  # noqa: E731
    out = list(overlapped(range(4), work, CPU, max_pending=1, clock=slow))
    assert out == [0, 1, 2, 3]
    assert slow.waited_s >= 0.05 and slow.tail_s >= 0.025  # 25 ms for the wake-up

    idle = SynthesisClock()  # a worker with nothing to do, and room for every group
    assert list(overlapped(range(4), lambda g: g, CPU, max_pending=8, clock=idle)) == [0, 1, 2, 3]
    # never held up: thread switches at most (a loose bound: CI's two cores may be busy)
    assert idle.waited_s < 0.5 > idle.tail_s
