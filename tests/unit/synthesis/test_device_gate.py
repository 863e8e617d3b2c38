"""The device gate lets the decode side in before the vocoder's next micro-batch, and the
vocoder (core/synthesis/vocoding.py) holds it per micro-batch, never for a whole group."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import torch

from qtts.core.synthesis.device_gate import DeviceGate
from qtts.core.synthesis.oom_backoff import OomBackoff
from qtts.core.synthesis.synthesis_clock import SynthesisClock
from qtts.core.synthesis.vocoding import Vocoding


def _until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_a_waiting_capture_goes_before_the_vocoders_next_micro_batch():
    gate, events, in_batch = DeviceGate(), [], threading.Event()

    def vocoder():
        for k in range(3):
            with gate.yielding():
                if k == 0:
                    in_batch.set()
                    _until(lambda: gate._decode_waiting > 0)  # the decode side now waits
                events.append(f"vocode {k}")

    worker = threading.Thread(target=vocoder)
    worker.start()
    in_batch.wait(5)
    with gate:  # a graph capture, say: waits for micro-batch 0 only
        events.append("capture")
    worker.join(5)
    assert events == ["vocode 0", "capture", "vocode 1", "vocode 2"]


def test_the_gate_excludes_both_sides():
    gate, inside, overlaps = DeviceGate(), [0], []

    def hold(enter):
        for _ in range(20):
            with enter():
                inside[0] += 1
                time.sleep(0.002)  # long enough for the other thread to run: it must wait
                overlaps.append(inside[0])
                inside[0] -= 1

    threads = [threading.Thread(target=hold, args=(lambda: gate,)),
               threading.Thread(target=hold, args=(gate.yielding,))]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert set(overlaps) == {1} and not gate.locked()


def _vocoding(gate: DeviceGate) -> SimpleNamespace:
    """A Vocoding's state, 2 rows per call, no graphs (the vocoder is the decoder itself)."""
    rows = OomBackoff(2, what="vocoder rows", device=torch.device("cpu"))
    driver = SimpleNamespace(gate=gate, clock=SynthesisClock())
    return SimpleNamespace(driver=driver, rows=rows, graphed=None)


class RecordingGate(DeviceGate):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def yielding(self):
        self.log.append("take")
        return super().yielding()


def test_the_vocoder_takes_the_gate_per_micro_batch():
    log = []
    gate = RecordingGate(log)

    def vocode_batch(batch):
        log.append(("batch", len(batch), gate.locked()))
        return iter(batch)

    out = Vocoding.in_micro_batches(_vocoding(gate), list(range(5)), vocode_batch)
    assert out == [0, 1, 2, 3, 4]
    assert log == ["take", ("batch", 2, True), "take", ("batch", 2, True), "take",
                   ("batch", 1, True)]  # fmt: skip
    assert not gate.locked()


def test_taking_it_twice_on_one_thread_is_an_error_not_a_hang():
    gate = DeviceGate()
    with gate:
        try:
            with gate.yielding():
                raise AssertionError("nested")
        except RuntimeError as e:
            assert "already held by this thread" in str(e)
    assert not gate.locked()


def test_the_vocoders_oom_frees_under_the_gate_once_the_failed_attempt_is_gone(monkeypatch):
    import weakref

    from qtts.core.synthesis import oom_backoff

    log, alive = [], []
    gate = DeviceGate()

    class Tensorish:  # stands in for a failed attempt's device tensors
        pass

    def vocode_batch(batch):
        if len(batch) > 1:
            held = Tensorish()
            alive.append(weakref.ref(held))
            raise torch.OutOfMemoryError("simulated")
        return iter(batch)

    def empty_cache(device):
        log.append(("free", gate.locked(), [r() is not None for r in alive]))

    monkeypatch.setattr(oom_backoff, "_empty_cache", empty_cache)
    assert Vocoding.in_micro_batches(_vocoding(gate), [0, 1, 2], vocode_batch) == [0, 1, 2]
    assert log == [("free", True, [False])]  # under the gate, the failed tensors already freed
