"""Long rows through the whole job (fake model, in process unless a kill needs a process): one
file per row, its length the segments' plus the pauses; results and codes say where the segments
are; a failed segment fails its row; a rerun redoes a row only when the split settings would
cut it differently; an interrupted long row is redone whole."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import fakes
import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from cli_calls import qtts, results, summary

from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.long_text.segments import segment_seed
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.jobs.work.chunks import REQUEST_FIELDS, chunk_requests
from qtts.core.synthesis.requests import attempt_seed

pytestmark = pytest.mark.usefixtures("fake_model")

# ~2,000 characters, 24 sentences of 12-16 words (a fake token is a word)
LONG = " ".join(f"Sentence {i} of the long paragraph goes on, and on, for a while until it "
                f"{'finally ' * (i % 3)}ends here." for i in range(24))  # fmt: skip
ROWS = [{"id": "long", "text": LONG, "seed": 5}, {"id": "short", "text": "A short row."},
        {"id": "two", "text": "First sentence here. Then a second one."}]  # fmt: skip
PAUSE = 6000  # the default 0.25 s at 24 kHz


def stamps(out) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in out.rglob("*") if p.is_file() and p.suffix != ".lock"}  # fmt: skip


def redo_line(result) -> str:
    (line,) = [x for x in result.stderr.splitlines() if "redoing" in x]
    return line


@pytest.fixture
def done(tmp_path, write_manifest):
    m, out = write_manifest(ROWS), tmp_path / "out"
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--save-codes")
    assert r.exit_code == 0 and summary(r)["ok"] == 3, r.stderr
    return m, out


def test_a_2000_character_row_is_one_file_of_its_segments_and_pauses(done):
    m, out = done
    assert len(LONG) > 2000
    res = results(out)
    long = res["long"]
    frames = long["segment_frames"]
    assert long["segments"] == len(frames) > 4 and sum(frames) == long["num_frames"]
    assert res["short"]["segments"] == 1 and res["short"]["segment_frames"] is None
    assert long["num_samples"] == sum(frames) * fakes.SAMPLES_PER_FRAME + (len(frames) - 1) * PAUSE
    audio, rate = sf.read(out / "long.wav", dtype="int16")
    assert rate == 24000 and len(audio) == long["num_samples"]
    first = frames[0] * fakes.SAMPLES_PER_FRAME
    assert not audio[first : first + PAUSE].any() and audio[:first].any()  # the pause is silent
    codes = np.load(out / "long.codes.npy")
    assert codes.shape == (sum(frames), 16)
    # The codes are each segment's, in order: the same requests synthesized on their own.
    state = pq.read_table(out / ".qtts" / "state.parquet", filters=[("id", "=", "long")])
    chunk = chunk_requests(state.select(list(REQUEST_FIELDS)), fakes.FakeTextModel("fake"),
                           FrameBudget(2048), SplitOptions())  # fmt: skip
    parts = sorted(chunk.requests, key=lambda r: int(r.id.split("\x1f")[1]))
    np.testing.assert_array_equal(codes, np.concatenate([fakes.fake_codes(r) for r in parts]))
    assert sorted(p.name for p in out.glob("long*")) == ["long.codes.npy", "long.wav"]
    # Each segment's rate is measured apiece (its text over its own audio), and the row's rate
    # against its voice's median spans its segments' (core/jobs/output/voice_rates.py).
    rates = long["segment_chars_per_s"]
    texts = [r.text for r in parts]
    seconds = [len(fakes.fake_codes(r)) * fakes.SAMPLES_PER_FRAME / 24000 for r in parts]
    want = [len("".join(t.split())) / s for t, s in zip(texts, seconds, strict=True)]
    assert rates == pytest.approx(want) and res["short"]["segment_chars_per_s"] is None
    assert long["rate_ratio_min"] < long["rate_ratio_max"]


def test_a_row_under_the_limit_is_made_as_without_splitting(done, tmp_path):
    m, out = done
    other = tmp_path / "whole"
    r = qtts("batch", m, "-o", other, "--speaker", "ryan", "--save-codes", "--split", "none")
    assert r.exit_code == 0
    for row_id in ("short", "two"):
        assert (out / f"{row_id}.wav").read_bytes() == (other / f"{row_id}.wav").read_bytes()
    assert (out / "long.wav").read_bytes() != (other / "long.wav").read_bytes()
    assert results(other)["long"]["segments"] == 1


def test_a_failed_segment_fails_its_row(tmp_path, write_manifest):
    text = LONG.replace("Sentence 20 of", "Sentence 20 [fail] of")
    m = write_manifest([{"id": "long", "text": text}, {"id": "short", "text": "fine"}])
    r = qtts("batch", m, "-o", tmp_path / "out", "--speaker", "ryan")
    assert r.exit_code == 3 and (summary(r)["ok"], summary(r)["failed"]) == (1, 1)
    error = results(tmp_path / "out")["long"]["error"]
    assert error.startswith("segment ") and error.endswith(": fake failure for this row")
    assert "row long: segment " in r.stderr and not (tmp_path / "out" / "long.wav").exists()


def test_retry_tries_a_segment_again_not_its_row(tmp_path, write_manifest):
    """--on-budget retry per segment: the segment that hits its budget is drawn again with a seed
    derived from its own, the others are kept as they were; a segment that hits it on every try
    fails its row, naming the segment and the tries."""
    text = LONG.replace("Sentence 20 of", "Sentence 20 [runaway:2] of")  # stops at its 3rd try
    stuck = LONG.replace("Sentence 3 of", "Sentence 3 [runaway:3] of")  # never within 3
    m = write_manifest([{"id": "long", "text": text, "seed": 5},
                        {"id": "stuck", "text": stuck, "seed": 6}])  # fmt: skip
    out = tmp_path / "out"
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--save-codes", "--on-budget", "retry")
    assert r.exit_code == 3 and (summary(r)["ok"], summary(r)["failed"]) == (1, 1)
    res = results(out)
    state = pq.read_table(out / ".qtts" / "state.parquet", filters=[("id", "=", "long")])
    chunk = chunk_requests(state.select(list(REQUEST_FIELDS)), fakes.FakeTextModel("fake"),
                           FrameBudget(2048), SplitOptions())  # fmt: skip
    parts = sorted(chunk.requests, key=lambda r: int(r.id.split("\x1f")[1]))
    assert [p.seed for p in parts] == [segment_seed(5, k) for k in range(len(parts))]
    tries = [3 if "[runaway:2]" in p.text else 1 for p in parts]
    assert tries.count(3) == 1 and len(parts) > 4
    long = res["long"]
    assert (long["status"], long["attempts"], long["hit_frame_budget"]) == ("ok", 3, False)
    assert long["kept_seed"] is None  # a split row keeps a seed per segment
    assert long["segment_seeds"] == [
        attempt_seed(p.seed, k) for p, k in zip(parts, tries, strict=True)
    ]
    want = [fakes.fake_codes(p, k) for p, k in zip(parts, tries, strict=True)]
    np.testing.assert_array_equal(np.load(out / "long.codes.npy"), np.concatenate(want))
    assert long["segment_frames"] == [len(c) for c in want]
    failed = res["stuck"]
    assert (failed["status"], failed["attempts"]) == ("failed", 3)
    tried = (
        r"segment \d+/\d+: hit the frame budget without EOS in 3 attempts "
        r"\(max_new_tokens \d+, \d+ frames each; --on-budget retry --max-attempts 3\)"
    )
    assert re.fullmatch(tried, failed["error"]), failed["error"]
    assert not (out / "stuck.wav").exists()


def test_an_unchanged_command_line_redoes_nothing_and_writes_nothing(done):
    m, out = done
    before = stamps(out)
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--save-codes")
    assert (summary(r)["skipped"], summary(r)["ok"]) == (3, 0) and "redoing" not in r.stderr
    assert stamps(out) == before


@pytest.mark.parametrize("flags, redone, reason", [
    (["--segment-pause", "0.5"], {"long"}, "split auto/50/0.25 -> auto/50/0.5 (1)"),
    (["--max-segment-tokens", "200"], {"long"}, "split auto/50/0.25 -> auto/200/0.25 (1)"),
    (["--max-segment-tokens", "4"], {"long", "two"}, "split auto/50/0.25 -> auto/4/0.25 (2)"),
    (["--split", "none"], {"long"}, "split auto/50/0.25 -> none (1)"),
    (["--split", "sentence"], {"long", "two"}, "split auto/50/0.25 -> sentence/50/0.25 (2)"),
])  # fmt: skip
def test_changed_split_settings_redo_only_the_rows_they_cut_differently(done, flags, redone,
                                                                        reason):  # fmt: skip
    m, out = done
    before = stamps(out)
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--save-codes", *flags)
    assert r.exit_code == 0 and summary(r)["ok"] == len(redone), r.stderr
    assert reason in redo_line(r)
    after = stamps(out)
    assert {n[: -len(".wav")] for n in before if n.endswith(".wav") and after[n] != before[n]} \
        == redone  # fmt: skip
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--save-codes", *flags)
    assert summary(r)["skipped"] == 3  # and then the new settings are the recorded ones


def test_rows_recorded_before_splitting_existed_are_kept_as_made(done):
    m, out = done
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--save-codes", "--split", "none")
    assert summary(r)["ok"] == 1  # the long row, made whole
    state = out / ".qtts" / "state.parquet"
    old = ["split", "segments", "segment_frames", "text_tokens"]  # what an older qtts lacks
    pq.write_table(pq.read_table(state).drop_columns(old), state)
    before = stamps(out)
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--save-codes")
    assert summary(r)["skipped"] == 3 and "redoing" not in r.stderr
    after = stamps(out)
    assert all(after[k] == v for k, v in before.items() if k.endswith((".wav", ".npy")))
    assert results(out)["long"]["segments"] == 1  # made whole, and says so


def test_dry_run_counts_the_rows_it_will_split(done, tmp_path):
    m, _ = done
    r = qtts("batch", m, "-o", tmp_path / "fresh", "--speaker", "ryan", "--dry-run")
    s = summary(r)
    assert (s["to_synthesize"], s["split_rows"]) == (3, 1) and s["segments"] > 4
    assert "(1 split into" in r.stderr
    r = qtts("batch", m, "-o", tmp_path / "fresh", "--speaker", "ryan", "--dry-run",
             "--split", "sentence")  # fmt: skip
    assert summary(r)["split_rows"] == 2


def test_a_segment_limit_the_model_cannot_speak_is_refused_when_given(
    tmp_path, write_manifest, monkeypatch
):
    """max_new_tokens 40: 39 frames speak at most 26 tokens (1.5 frames each). The default 50
    is fitted to 26 with one log line; a limit the user gave is the user's: 50 is refused."""
    monkeypatch.setenv("QTTS_FAKE_MAX_NEW_TOKENS", "40")
    m = write_manifest(ROWS)
    r = qtts("batch", m, "-o", tmp_path / "out", "--speaker", "ryan", "--max-segment-tokens", 50)
    assert r.exit_code == 2 and "--max-segment-tokens 50 is more than this model" in r.stderr
    assert not (tmp_path / "out").exists()
    r = qtts("batch", m, "-o", tmp_path / "out", "--speaker", "ryan")
    assert r.exit_code == 0 and summary(r)["ok"] == 3, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if "the default 50 is more" in x]
    assert "--max-segment-tokens 26:" in line and "allows 39 (max_new_tokens 40)" in line
    state = pq.read_table(tmp_path / "out" / ".qtts" / "state.parquet").to_pylist()
    long = next(x for x in state if x["id"] == "long")
    assert long["split"] == "auto/26/0.25" and long["segments"] > 4  # recorded as it ran
    r = qtts("batch", m, "-o", tmp_path / "out2", "--speaker", "ryan",
             "--max-segment-tokens", "20")  # fmt: skip
    assert r.exit_code == 0 and summary(r)["ok"] == 3
    assert not any("the default 50" in x for x in r.stderr.splitlines())


def test_a_long_row_interrupted_midway_is_redone_whole(tmp_path, write_manifest):
    """kill -9 while the long row's slow segment runs (others of its segments are done): no file,
    no record; the rerun makes the row whole and leaves the short rows as they were."""
    text = LONG.replace("Sentence 3 of", "Sentence 3 [slow] of")
    m = write_manifest([{"id": "long", "text": text}, *ROWS[1:]])
    out, mark = tmp_path / "out", tmp_path / "busy"
    cmd = fakes.qtts_cmd("batch", m, "-o", out, "--speaker", "ryan", "-q")
    p = subprocess.Popen(cmd, env=fakes.fake_env(QTTS_FAKE_SLOW="60", QTTS_FAKE_MARK=str(mark)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _wait(lambda: mark.exists() and (out / "short.wav").exists(), p)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    assert not (out / "long.wav").exists()
    short = (out / "short.wav").stat().st_mtime_ns
    r = subprocess.run(cmd, env=fakes.fake_env(QTTS_FAKE_SLOW="0"), capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert (s["ok"], s["skipped"]) == (1, 2)
    long = results(out)["long"]
    assert long["status"] == "ok" and long["segments"] > 4
    assert sf.info(str(out / "long.wav")).frames == long["num_samples"]
    assert (out / "short.wav").stat().st_mtime_ns == short


def _wait(predicate, proc, timeout: float = 30.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, "the job ended before it could be interrupted"
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.02)
