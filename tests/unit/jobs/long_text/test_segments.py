"""Long rows as segment requests and back: a row left whole is exactly today's request; a split
row's segments share its voice, take seeds derived from its own, each get their own budget, and
come back as one utterance (audio joined with pauses, codes one after another) or one failure
naming the segment. Fake model, no torch."""

from __future__ import annotations

import fakes
import numpy as np
import pyarrow as pa
import pytest

from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.long_text import segments
from qtts.core.jobs.long_text.segments import segment_seed, synthesize_chunk
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.jobs.work.chunks import chunk_requests
from qtts.core.synthesis.requests import GenerationOptions, RowFailure, Utterance

# 20 sentences of 7 words (a fake token is a word): 2 sentences per segment of 20 -> 10 segments
LONG = " ".join(f"Sentence number {i} has exactly seven words." for i in range(20))
OPTIONS = GenerationOptions(None, None)


def _rows(*texts, seed=7) -> pa.Table:
    return pa.Table.from_pylist([
        {"id": f"r{i}", "row": i + 1, "text": t, "speaker": "ryan", "language": "english",
         "instruct": None, "seed": seed + i, "ref_audio": None, "ref_text": None,
         "voice": None}
        for i, t in enumerate(texts)
    ])  # fmt: skip


def _chunk(*texts, split=SplitOptions(max_segment_tokens=20), budget=FrameBudget(2048)):
    return chunk_requests(_rows(*texts), fakes.FakeTextModel("fake"), budget, split)


def test_a_row_under_the_limit_is_exactly_todays_request():
    texts = ("a short row.", "Two sentences here. And here.", "one two three four five six")
    today = chunk_requests(_rows(*texts), fakes.FakeTextModel("fake"), FrameBudget(2048))
    for mode in ("auto", "none"):
        chunk = _chunk(*texts, split=SplitOptions(mode, 20))
        assert chunk.requests == today.requests and chunk.split.place == {}
    chunk = _chunk(*texts, split=SplitOptions("sentence", 20))  # every sentence: r1 is cut
    assert set(chunk.split.place) == {"r1\x1f0", "r1\x1f1"}
    assert [r for r in chunk.requests if r.id in ("r0", "r2")] == [today.requests[0],
                                                                  today.requests[2]]  # fmt: skip


def test_a_long_row_becomes_segments_with_its_voice_and_derived_seeds():
    chunk = _chunk(LONG, "short row")
    parts = [r for r in chunk.requests if r.id.startswith("r0")]
    assert len(parts) == 10 and {r.id for r in parts} == {f"r0\x1f{k}" for k in range(10)}
    by_index = sorted(parts, key=lambda r: int(r.id.split("\x1f")[1]))
    assert " ".join(r.text for r in by_index) == LONG
    assert all(len(r.text.split()) <= 20 for r in parts)
    assert {(r.speaker, r.language, r.row) for r in parts} == {("ryan", "english", 1)}
    seeds = [r.seed for r in by_index]
    assert seeds == [segment_seed(7, k) for k in range(10)] and len(set(seeds)) == 10
    assert all(0 <= s < 2**63 for s in seeds)
    # the same in every process and version (a rerun draws the same segments), the row's own
    assert seeds[:2] == [5751740483655848561, 7643869921872156431]
    assert segment_seed(8, 0) not in seeds
    budget = FrameBudget(2048)
    assert all(r.max_new_tokens == budget.max_new_tokens(len(r.text.split())) for r in parts)
    assert chunk.requests[-1].id == "r1"  # one length-sorted queue: long segments first
    assert chunk.budgets["r0"] == max(r.max_new_tokens for r in parts)


def test_segments_are_joined_with_pauses_and_codes_in_order():
    chunk = _chunk(LONG, "short row", split=SplitOptions(max_segment_tokens=20, pause_s=0.5))
    synth = fakes.FakeSynthesizer()
    out = {u.id: u for u in synthesize_chunk(synth, chunk, OPTIONS, "ok")}
    assert set(out) == {"r0", "r1"} and out["r1"].segment_frames is None
    parts = sorted((r for r in chunk.requests if r.id != "r1"), key=lambda r: int(r.id[3:]))
    codes = [fakes.fake_codes(r) for r in parts]
    row = out["r0"]
    np.testing.assert_array_equal(row.codes, np.concatenate(codes))
    assert row.segment_frames == tuple(len(c) for c in codes)
    pause = 12000  # 0.5 s at 24 kHz
    assert len(row.audio) == sum(len(c) * fakes.SAMPLES_PER_FRAME for c in codes) + 9 * pause
    first = len(codes[0]) * fakes.SAMPLES_PER_FRAME
    assert not row.audio[first : first + pause].any() and row.audio[:first].any()


def test_a_failed_segment_fails_its_row_naming_the_segment():
    text = LONG.replace("number 9 has", "number 9 [fail] has")
    chunk = _chunk(text, "short row")
    out = list(synthesize_chunk(fakes.FakeSynthesizer(), chunk, OPTIONS, "ok"))
    failed = [o for o in out if isinstance(o, RowFailure)]
    assert [(f.id, f.error) for f in failed] == [("r0", "segment 5/10: fake failure for this row")]
    assert [o.id for o in out if isinstance(o, Utterance)] == ["r1"]  # one result per row


def test_a_segment_out_of_frames_fails_its_row_with_on_budget_fail():
    chunk = _chunk(LONG.replace("number 4 has", "number 4 [runaway] has"))
    (fail,) = synthesize_chunk(fakes.FakeSynthesizer(), chunk, OPTIONS, "fail")
    assert fail.error.startswith("segment 3/10: hit the frame budget without EOS")
    (ok,) = synthesize_chunk(fakes.FakeSynthesizer(), chunk, OPTIONS, "ok")
    assert ok.hit_frame_budget  # kept, flagged: one segment hit it


def test_a_segment_too_long_for_the_budget_fails_before_synthesis():
    word = "x" * 50
    text = f"Fine words here. {' '.join([word] * 3)}"  # fake: a word is a token
    budget = FrameBudget(6)  # 1.5 frames per token: at most 3 tokens fit in 5 frames
    chunk = _chunk(text, "ok row", split=SplitOptions(max_segment_tokens=3), budget=budget)
    assert chunk.split.failed == {} and len(chunk.requests) == 3  # cut between words: all fit
    chunk = _chunk("one two three four five", split=SplitOptions("sentence", 5), budget=budget)
    (fail,) = synthesize_chunk(fakes.FakeSynthesizer(), chunk, OPTIONS, "ok")
    assert fail.id == "r0" and fail.error.startswith("text too long for the frame budget")


def test_calls_bound_the_audio_held_and_keep_a_row_in_one_call(monkeypatch):
    monkeypatch.setattr(segments, "MAX_SPLIT_FRAMES_PER_CALL", 300)
    chunk = _chunk(LONG, LONG, LONG, "short row")
    calls = segments.calls(chunk.requests, chunk.est_frames, chunk.split)
    assert len(calls) == 3 and "r3" in {r.id for r in calls[0]}
    rows = [{segments.row_of_segment(r.id) for r in call} - {None} for call in calls]
    assert rows == [{"r0"}, {"r1"}, {"r2"}]
    synth = fakes.FakeSynthesizer()
    out = list(synthesize_chunk(synth, chunk, OPTIONS, "ok"))
    assert len(synth.calls) == 3 and sorted(u.id for u in out) == ["r0", "r1", "r2", "r3"]


@pytest.mark.parametrize(
    "key", ["auto/50/0.25", "sentence/7/0", "auto/50/0.30000000000000004", "none"]
)
def test_the_key_a_record_keeps_reads_back(key):
    assert SplitOptions.from_key(key).key == key
    assert SplitOptions.from_key(None).key == SplitOptions.from_key("garbage").key == "none"
