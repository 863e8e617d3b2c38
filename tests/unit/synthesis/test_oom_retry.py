"""Out of memory anywhere: halve, and redo only what had not finished (one policy, every site).

Simulated on CPU. The engine's sites (prefill, decode step, graph capture) raise
torch.OutOfMemoryError once per pass while it runs with more than 2 slots: the synthesizer halves
the slots (8 -> 4 -> 2) and reruns the unfinished rows; seeded draws make the rerun produce what
the first attempt would have, so the codes equal an undisturbed run and no finished row is
prefilled again. The vocoder's OOM halves its micro-batch and decodes only the rows not done.
"""

import weakref
from types import SimpleNamespace

import pytest
import torch
from golden import AUDIO_ATOL

from qtts.core.engine.loop.engine import Engine
from qtts.core.synthesis.requests import GenerationOptions, Request


@pytest.fixture(scope="module")
def synth():
    import tempfile
    from pathlib import Path

    from qtts.core.synthesis.requests import Placement
    from qtts.core.synthesis.session import load_synthesizer, open_text_model
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    ck = make_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", seed=4)
    text_model = open_text_model(str(ck))
    return text_model, load_synthesizer(
        text_model, Placement(device="cpu", dtype="float32", batch_size=8)
    )


def _requests(budget=None):
    return [Request(f"r{i}", f"Line number {i}.", i + 1, "vivian", "english", None, seed=i,
                    max_new_tokens=budget or 3 + i) for i in range(8)]  # fmt: skip


def _run(text_model, synth, budget=None):
    d = text_model.defaults
    out = list(synth.synthesize(_requests(budget), GenerationOptions(d.talker, d.subtalker)))
    return {u.id: u.codes for u in out}, [u.id for u in out]


def _once_per_pass(real, at_call: int):
    """Wrap an Engine method to raise OOM at its at_call-th call of each engine with > 2 slots."""
    calls = weakref.WeakKeyDictionary()  # per engine object (an id() can be reused once freed)

    def flaky(engine, *args, **kwargs):
        n = calls[engine] = calls.get(engine, 0) + 1
        if engine.state.slots > 2 and n == at_call:
            raise torch.OutOfMemoryError("simulated")
        return real(engine, *args, **kwargs)

    return flaky


@pytest.mark.parametrize(("site", "at_call"), [("prefill", 4), ("decode_step", 5)])
def test_oom_in_the_engine_halves_slots_and_reruns_only_the_unfinished(
    synth, monkeypatch, site, at_call
):
    text_model, s = synth
    expected, _ = _run(text_model, s)
    prefilled, seen_slots = [], []
    real_prefill = Engine.prefill

    def logged_prefill(engine, fills):
        seen_slots.append(engine.state.slots)
        prefilled.extend(f.slot for f in fills)  # one entry per row prefilled
        return real_prefill(engine, fills)

    monkeypatch.setattr(Engine, "prefill", logged_prefill)
    monkeypatch.setattr(Engine, site, _once_per_pass(getattr(Engine, site), at_call))
    got, order = _run(text_model, s)
    assert sorted(order) == sorted(expected) and len(order) == len(set(order))  # each row once
    for k in expected:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(expected[k])), k
    assert sorted(set(seen_slots), reverse=True) == [8, 4, 2]  # halved twice
    # Rows finished before an OOM are not prefilled again: fewer than 3 x 8 prefills in all.
    assert len(prefilled) < 3 * 8


def test_the_retry_frees_cached_memory_only_under_the_device_gate(synth, monkeypatch):
    """Freeing the allocator's cached blocks while the vocoder thread captures a graph is an
    error on CUDA: the engine's retry takes the gate the vocoder holds while it works."""
    from qtts.core.synthesis import oom_backoff as module

    text_model, s = synth
    gate_held = []
    monkeypatch.setattr(
        module, "_empty_cache", lambda device: gate_held.append(s.driver.gate.locked())
    )
    monkeypatch.setattr(Engine, "prefill", _once_per_pass(Engine.prefill, 4))
    _run(text_model, s)
    assert gate_held and all(gate_held)


def test_oom_in_the_vocoder_halves_its_micro_batch_and_decodes_each_row_once(synth, monkeypatch):
    """Equal budgets: all 8 rows finish at the same step and reach the vocoder together."""
    from qtts.core.synthesis import vocoding as module

    text_model, s = synth
    d = text_model.defaults
    opts = GenerationOptions(d.talker, d.subtalker)
    want = {u.id: u for u in s.synthesize(_requests(budget=5), opts)}
    real, batches = module.decode_bucketed, []

    def flaky(decoder, codes, *args, **kwargs):
        batches.append(len(codes))
        if len(codes) > 1:
            raise torch.OutOfMemoryError("simulated")
        return real(decoder, codes, *args, **kwargs)

    monkeypatch.setattr(module, "decode_bucketed", flaky)
    got = {u.id: u for u in s.synthesize(_requests(budget=5), opts)}
    assert sorted(got) == sorted(want)
    for k, u in want.items():
        assert torch.equal(torch.as_tensor(got[k].codes), torch.as_tensor(u.codes)), k
        torch.testing.assert_close(torch.as_tensor(got[k].audio), torch.as_tensor(u.audio),
                                   rtol=0, atol=AUDIO_ATOL)  # fmt: skip
    # The CPU's plan decodes 2 rows at a time (VOCODER_MAX_BATCH): the first pair fails, then
    # every row alone: each row is decoded exactly once in the end.
    assert s.vocoding.rows.size == 1 and batches == [2] + [1] * 8


def test_graph_capture_waits_for_the_vocoder_and_its_oom_halves_the_slots(synth, monkeypatch):
    """The GPU's graph path, run on CPU through eager "graphs": every pass captures its graphs
    before its first prefill while holding the device gate, never while the vocoder thread is
    decoding a micro-batch (its first takes 0.5 s, so the retry's capture would overlap it
    without the gate; the gate is held per micro-batch, so a capture may come between two of a
    group's), and an out-of-memory capture is retried with half the slots like any other OOM:
    same codes, each row once."""
    import threading
    import time
    from dataclasses import replace

    from qtts.core.engine.device.tuning import EngineTuning
    from qtts.core.engine.loop import graphs

    text_model, s = synth
    expected, _ = _run(text_model, s)
    cpu = EngineTuning.for_device("cpu", env={})
    # the GPU's arrangement on CPU tensors: graphs captured, the vocoder on its own thread
    graphed = replace(cpu, cuda_graphs=True, allow_host_sync=False, vocoder_thread=True)
    monkeypatch.setattr(s.driver, "tuning", graphed)
    vocoding, captures, batches = threading.Event(), [], []
    real_batch = type(s)._vocode_batch

    def slow_vocode_batch(self, batch):
        vocoding.set()
        batches.append(len(batch))
        time.sleep(0.5 if len(batches) == 1 else 0.0)
        try:
            yield from real_batch(self, batch)
        finally:
            vocoding.clear()

    class Checked(graphs.EagerGraphs):
        def capture(self, step, view_len):
            slots = step.__self__.state.slots
            assert not vocoding.is_set(), "a graph capture ran while the vocoder was working"
            assert s.driver.gate.locked(), "a graph capture ran without the device gate"
            captures.append(slots)
            if slots == 4:
                raise torch.OutOfMemoryError("simulated: out of memory during capture")
            return super().capture(step, view_len)

    real_pass, seen_slots = type(s)._engine_pass, []

    def flaky_pass(self, requests, tokens, order, slots, plan_group, options):
        seen_slots.append(slots)
        for i, group in enumerate(
            real_pass(self, requests, tokens, order, slots, plan_group, options)
        ):
            if slots > 4 and i == 1:
                raise torch.OutOfMemoryError("simulated: out of memory while decoding")
            yield group

    monkeypatch.setattr(type(s), "_vocode_batch", slow_vocode_batch)
    monkeypatch.setattr(type(s), "_engine_pass", flaky_pass)
    monkeypatch.setattr(graphs, "default_backend", lambda engine: Checked())
    got, order = _run(text_model, s)
    assert sorted(order) == sorted(expected) and len(order) == len(set(order))
    for k in expected:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(expected[k])), k
    assert seen_slots == [8, 4, 2] and set(captures) == {8, 4, 2}


def test_a_capture_failure_that_is_not_oom_decodes_without_graphs(synth, monkeypatch, caplog):
    """A capture that fails for another reason costs speed, not the job: that pass decodes
    eagerly, with a warning naming the failure, and the codes are the same."""
    from dataclasses import replace

    from qtts.core.engine.device.tuning import EngineTuning
    from qtts.core.engine.loop import graphs

    text_model, s = synth
    expected, _ = _run(text_model, s)
    cpu = EngineTuning.for_device("cpu", env={})
    # the GPU's arrangement on CPU tensors: graphs captured, the vocoder on its own thread
    graphed = replace(cpu, cuda_graphs=True, allow_host_sync=False, vocoder_thread=True)
    monkeypatch.setattr(s.driver, "tuning", graphed)

    class Broken(graphs.EagerGraphs):
        def capture(self, step, view_len):
            raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "default_backend", lambda engine: Broken())
    with caplog.at_level("WARNING", logger="qtts"):
        got, order = _run(text_model, s)
    assert sorted(order) == sorted(expected)
    for k in expected:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(expected[k])), k
    assert "decoding this pass without CUDA graphs" in caplog.text
    assert "operation not permitted" in caplog.text


def _graphed_on_cpu(s, monkeypatch):
    """The GPU's arrangement on CPU tensors: graphs captured (through `backend`), the vocoder on
    its own thread holding the device gate."""
    from dataclasses import replace

    from qtts.core.engine.device.tuning import EngineTuning

    cpu = EngineTuning.for_device("cpu", env={})
    graphed = replace(cpu, cuda_graphs=True, allow_host_sync=False, vocoder_thread=True)
    monkeypatch.setattr(s.driver, "tuning", graphed)


def test_a_capture_that_breaks_turns_graphs_off_for_the_process(synth, monkeypatch):
    """A capture failure that is not out of memory may leave the allocator mid-capture: the pass
    decodes eagerly, later passes capture nothing, and nothing empties the cache again (a fake
    capture_end that raises; same codes, each row once)."""
    from qtts.core.engine.loop import graphs
    from qtts.core.synthesis import oom_backoff

    text_model, s = synth
    expected, _ = _run(text_model, s)
    _graphed_on_cpu(s, monkeypatch)
    captures, emptied = [], []

    class BrokenCaptureEnd(graphs.EagerGraphs):
        def capture(self, step, view_len):
            captures.append(view_len)
            raise RuntimeError("capture_end: operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "default_backend", lambda engine: BrokenCaptureEnd())
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    got, order = _run(text_model, s)
    assert graphs.capture_broken() is not None and len(captures) == 1
    assert sorted(order) == sorted(expected) and len(order) == len(set(order))
    for k in expected:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(expected[k])), k
    _run(text_model, s)  # a later call: no capture tried, and no cache emptied on OOM either
    assert len(captures) == 1
    oom_backoff.OomBackoff(2, what="slots", device=torch.device("cuda")).free()
    assert emptied == []


def test_the_kv_cache_is_allocated_under_the_device_gate_when_graphs_run(synth, monkeypatch):
    """While the vocoder thread captures, the allocator skips the retry that frees a finished
    graph's pool: the slot state is built holding the gate the vocoder's work holds."""
    from qtts.core.engine.loop import graphs
    from qtts.core.synthesis import engine_driver

    text_model, s = synth
    _graphed_on_cpu(s, monkeypatch)
    held, real_state = [], engine_driver.SlotState

    def recorded(*args, **kwargs):
        held.append(s.driver.gate.locked())
        return real_state(*args, **kwargs)

    monkeypatch.setattr(graphs, "default_backend", lambda engine: graphs.EagerGraphs())
    monkeypatch.setattr(engine_driver, "SlotState", recorded)
    _run(text_model, s)
    assert held and all(held)


@pytest.mark.parametrize("when", ["lazy", "ahead"])
def test_vocoder_graphs_are_captured_under_the_gate_as_first_met_or_ahead(synth, monkeypatch, when):
    """The speech decoder's graphs: by default each window shape is captured when the vocoder
    first meets it, beside decoding, so none is captured before the first prefill and only the
    shapes the rows make are (plus the largest, which sizes the pool); QTTS_VOCODER_CAPTURE=ahead
    captures every planned shape before the first prefill. Every capture holds the device gate,
    the audio is the eager decode's, and the clock counts the graphs and where their time went."""
    from dataclasses import replace

    from qtts.core.engine.vocoder.vocoder_graphs import GraphedVocoder
    from qtts.core.engine.vocoder.vocoder_windows import bucket_shapes
    from qtts.core.synthesis.synthesis_clock import SynthesisClock

    text_model, s = synth
    expected, _ = _run(text_model, s)
    events = []

    class Recorded:
        def warmup(self, window, key, steps):
            for _ in range(steps):
                window(key)

        def capture(self, window, key):
            events.append(("capture", key, s.driver.gate.locked()))
            return SimpleNamespace(replay=lambda: window(key))

    def prefill(engine, fills):
        events.append(("prefill",))
        return real_prefill(engine, fills)

    real_prefill = Engine.prefill
    monkeypatch.setattr(Engine, "prefill", prefill)
    monkeypatch.setattr(s.driver, "tuning", replace(s.driver.tuning, vocoder_capture=when))
    monkeypatch.setattr(s.driver, "clock", SynthesisClock())
    # Windows of up to 40 frames: the rows here are short, and capturing every 300-frame window
    # on a CPU would only cost time.
    vocoder = GraphedVocoder(s.decoder, 2, backend=Recorded(), max_frames=40)
    monkeypatch.setattr(s.vocoding, "graphed", vocoder)
    got, _ = _run(text_model, s)
    first_prefill = events.index(("prefill",))
    captures = [e for e in events if e[0] == "capture"]
    assert all(held for *_, held in captures)
    planned = {(r, f) for r, f in bucket_shapes(s.vocoding.rows.size) if f <= 40}
    largest = (2, 40)  # the reservation's whole window, captured first: it sizes the pool
    captured = [key for _, key, _ in captures]
    assert captured[0] == largest and len(captured) == len(set(captured))
    if when == "ahead":
        assert events[:first_prefill] == captures and set(captured) == planned | {largest}
        assert s.clock.vocoder_capture_s > 0 and s.clock.vocoder_first_met_s == 0
    else:
        assert not any(e[0] == "capture" for e in events[:first_prefill])
        assert set(captured) < planned | {largest}  # only what these rows' windows needed
        assert s.clock.vocoder_capture_s == 0 and s.clock.vocoder_first_met_s > 0
    assert s.clock.vocoder_graphs == len(captured)
    for k in expected:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(expected[k])), k


def test_tries_halve_on_out_of_memory_and_free_after_the_error_is_gone(monkeypatch):
    """The one try/shrink/free loop: each try runs at most `size` rows; out of memory halves it,
    frees the cached blocks once the failed try's exception is gone, and tries again; at one row
    it re-raises."""
    import weakref

    from qtts.core.synthesis import oom_backoff
    from qtts.core.synthesis.oom_backoff import OomBackoff

    freed, alive = [], []

    class Held:  # a failed try's device tensors
        pass

    monkeypatch.setattr(oom_backoff, "_empty_cache", lambda device: freed.append(
        [r() is not None for r in alive]))  # fmt: skip

    def run(rows):  # a try: its tensors live in its frame, which the traceback pins
        if rows > 2:
            held = Held()
            alive.append(weakref.ref(held))
            raise torch.OutOfMemoryError("simulated")

    backoff, left, sizes = OomBackoff(8, what="rows", device=torch.device("cpu")), [10], []
    for attempt in backoff.tries(lambda: left[0] > 0):
        attempt.rows = min(attempt.size, left[0])
        sizes.append(attempt.rows)
        with attempt:
            run(attempt.rows)
            left[0] -= attempt.rows
    assert sizes == [8, 4, 2, 2, 2, 2, 2] and backoff.size == 2
    assert freed == [[False], [False, False]]  # after each failure, its tensors already gone
    one = OomBackoff(1, what="rows", device=torch.device("cpu"))
    with pytest.raises(torch.OutOfMemoryError):
        for attempt in one.tries(lambda: True):
            with attempt:
                raise torch.OutOfMemoryError("one row")


def test_or_none_reports_out_of_memory_and_passes_other_errors(monkeypatch):
    from qtts.core.synthesis import oom_backoff

    freed = []
    monkeypatch.setattr(oom_backoff, "_empty_cache", lambda device: freed.append(device))
    cpu = torch.device("cpu")

    def boom():
        raise torch.OutOfMemoryError("simulated")

    assert oom_backoff.or_none(lambda: 3, cpu) == 3 and freed == []
    assert oom_backoff.or_none(boom, cpu) is None and freed == [cpu]
    with pytest.raises(ValueError):
        oom_backoff.or_none(lambda: int("x"), cpu)
