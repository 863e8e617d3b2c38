"""CUDA out-of-memory during generation: halve the slots and rerun only what had not finished.

Simulated on CPU: the engine pass raises torch.OutOfMemoryError after its first finished group
whenever it runs with more than 2 slots. Seeded draws make the rerun produce what the first
attempt would have, so the codes equal an undisturbed run.
"""

import pytest
import torch

from qtts.core.synthesis.requests import GenerationOptions, Request


@pytest.fixture(scope="module")
def synth():
    import tempfile
    from pathlib import Path

    from qtts.core.synthesis.session import load_synthesizer, open_text_model
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    ck = make_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", seed=4)
    text_model = open_text_model(str(ck))
    return text_model, load_synthesizer(text_model, "cpu", "float32", 8)


def _requests():
    return [Request(f"r{i}", f"Line number {i}.", i + 1, "vivian", "english", None, seed=i,
                    max_new_tokens=3 + i) for i in range(8)]  # fmt: skip


def _run(text_model, synth):
    d = text_model.defaults
    out = list(synth.synthesize(_requests(), GenerationOptions(d.talker, d.subtalker)))
    return {u.id: u.codes for u in out}, [u.id for u in out]


def test_oom_halves_slots_and_reruns_only_the_unfinished(synth, monkeypatch):
    text_model, s = synth
    expected, _ = _run(text_model, s)
    real_pass, seen_slots = type(s)._engine_pass, []

    def flaky_pass(self, requests, tokens, order, slots, options):
        seen_slots.append((slots, len(order)))
        for i, group in enumerate(real_pass(self, requests, tokens, order, slots, options)):
            if slots > 2 and i == 1:
                raise torch.OutOfMemoryError("simulated")
            yield group

    monkeypatch.setattr(type(s), "_engine_pass", flaky_pass)
    got, order = _run(text_model, s)
    assert sorted(order) == sorted(expected) and len(order) == len(set(order))  # each row once
    for k in expected:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(expected[k])), k
    assert [n for n, _ in seen_slots] == [8, 4, 2]  # halved twice
    assert seen_slots[1][1] < 8 and seen_slots[2][1] < seen_slots[1][1]  # only the unfinished rerun


def test_graph_capture_waits_for_the_vocoder_and_its_oom_halves_the_slots(synth, monkeypatch):
    """The GPU's graph path, run on CPU through eager "graphs": every pass captures its graphs
    before its first prefill while holding the device gate, never while the vocoder thread is
    decoding (its first job takes 0.5 s, so the retry's capture would overlap it without the
    gate), and an out-of-memory capture is retried with half the slots like any other OOM:
    same codes, each row once."""
    import threading
    import time
    from dataclasses import replace

    from qtts.core.engine import graphs
    from qtts.core.engine.settings import EngineSettings

    text_model, s = synth
    expected, _ = _run(text_model, s)
    cpu = EngineSettings.for_device("cpu", env={})
    graphed = replace(cpu, cuda_graphs=True, allow_host_sync=False)
    monkeypatch.setattr(EngineSettings, "for_device", classmethod(lambda cls, *a, **k: graphed))
    vocoding, captures, jobs = threading.Event(), [], []
    real_vocode = type(s)._vocode

    def slow_vocode(self, group):
        vocoding.set()
        jobs.append(len(group))
        time.sleep(0.5 if len(jobs) == 1 else 0.0)
        try:
            yield from real_vocode(self, group)
        finally:
            vocoding.clear()

    class Checked(graphs.EagerGraphs):
        def capture(self, step, view_len):
            slots = step.__self__.state.slots
            assert not vocoding.is_set(), "a graph capture ran while the vocoder was working"
            assert s.device_gate.locked(), "a graph capture ran without the device gate"
            captures.append(slots)
            if slots == 4:
                raise torch.OutOfMemoryError("simulated: out of memory during capture")
            return super().capture(step, view_len)

    real_pass, seen_slots = type(s)._engine_pass, []

    def flaky_pass(self, requests, tokens, order, slots, options):
        seen_slots.append(slots)
        for i, group in enumerate(real_pass(self, requests, tokens, order, slots, options)):
            if slots > 4 and i == 1:
                raise torch.OutOfMemoryError("simulated: out of memory while decoding")
            yield group

    monkeypatch.setattr(type(s), "_vocode", slow_vocode)
    monkeypatch.setattr(type(s), "_engine_pass", flaky_pass)
    monkeypatch.setattr(graphs, "default_backend", lambda engine: Checked())
    got, order = _run(text_model, s)
    assert sorted(order) == sorted(expected) and len(order) == len(set(order))
    for k in expected:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(expected[k])), k
    assert seen_slots == [8, 4, 2] and set(captures) == {8, 4, 2}
