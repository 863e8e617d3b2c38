"""CUDA out-of-memory during generation: halve the slots and rerun only what had not finished.

Simulated on CPU: the engine pass raises torch.OutOfMemoryError after its first finished group
whenever it runs with more than 2 slots. Seeded draws make the rerun produce what the first
attempt would have, so the codes equal an undisturbed run.
"""

import pytest
import torch

from qtts.core.requests import GenerationOptions, Request


@pytest.fixture(scope="module")
def synth():
    import tempfile
    from pathlib import Path

    from qtts.core.session import load_synthesizer, open_text_model
    from qtts.core.tiny_checkpoint import make_tiny_checkpoint

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
