"""`qtts batch --on-budget retry` end to end, on a tiny checkpoint whose EOS is aimed so that
sampled rows stop under some seeds and run to their frame budget under others
(tests/aimed_eos.py). CPU fp32, sampling on.

The oracle is each try of each row synthesized on its own (seed attempt_seed(seed, k), no
retries). From it follows what every policy keeps: retry/N the first try that stops within N
(else the row fails after N), ok the first try, flagged or not. The job must record that try
(attempts, kept_seed, its exact codes) and the row's model-free measures in results.parquet; a
rerun under the same policy redoes no done row; a rerun under another policy redoes exactly the
rows core/jobs/work/budget.py names, and ends with what that policy makes from scratch.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from aimed_eos import aim_eos, store_eos_row
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.jobs.output.recorder import MEASURES, SILENCE_FRAME_S, measure, repeat_ratio
from qtts.core.synthesis.requests import GenerationOptions, Placement, Request, attempt_seed

SAMPLE_RATE = 24_000
BUDGET = 10  # --max-new-tokens: 9 frames for a try that never stops
ROWS = (0, 2, 3, 5, 7)  # row i: text "Line number i.", seed i
TRIES = 4  # tries the oracle makes of each row: the most any run below allows
# The job decodes its rows in batches, the oracle one try per request: the audio may differ in
# rounding (the vocoder's padded batches), so the audio measures agree within these.
PEAK_TOL = 1e-4  # full scale
DB_TOL = 0.01  # dB
RATE_REL = 1e-12  # chars_per_s: one float division either way
SILENT_FRAMES_TOL = 1  # 20 ms frames that may fall on either side of the floor


def _request(i: int, k: int) -> Request:
    return Request(f"r{i}/{k}", f"Line number {i}.", i + 1, "vivian", "english", None,
                   seed=attempt_seed(i, k), max_new_tokens=BUDGET)  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.synthesis.session import load_synthesizer, open_text_model
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    ck = make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", seed=3)
    text_model = open_text_model(str(ck))
    synth = load_synthesizer(text_model, Placement(device="cpu", dtype="float32", batch_size=8))
    d = text_model.defaults
    row = aim_eos(synth, text_model, [_request(0, 1)], GenerationOptions(d.talker, d.subtalker))
    store_eos_row(ck, text_model, row)
    return ck


@pytest.fixture(scope="module")
def oracle(checkpoint) -> dict:
    """(row, try) -> that try alone, from the checkpoint as stored (one call, no retries)."""
    from qtts.core.synthesis.session import load_synthesizer, open_text_model

    text_model = open_text_model(str(checkpoint))
    d = text_model.defaults
    assert d.talker.do_sample and d.subtalker.do_sample  # sampling on: the seed matters
    synth = load_synthesizer(text_model, Placement(device="cpu", dtype="float32", batch_size=8))
    requests = [_request(i, k) for i in ROWS for k in range(1, TRIES + 1)]
    out = {u.id: u for u in synth.synthesize(requests, GenerationOptions(d.talker, d.subtalker))}
    return {(i, k): out[f"r{i}/{k}"] for i in ROWS for k in range(1, TRIES + 1)}


def kept(oracle, i: int, n: int) -> int | None:
    """The try retry/n keeps of row i: its first that stopped, or None (the row fails)."""
    return next((k for k in range(1, n + 1) if not oracle[i, k].hit_frame_budget), None)


@pytest.fixture(autouse=True)
def real_model(monkeypatch):
    monkeypatch.delenv("QTTS_FAKE_SYNTH", raising=False)


@pytest.fixture
def manifest(write_manifest):
    return write_manifest([{"id": f"r{i}", "text": f"Line number {i}.", "seed": i,
                            "language": "English"} for i in ROWS])  # fmt: skip


def batch(checkpoint, manifest, out, *policy: str):
    r = CliRunner().invoke(app, ["batch", str(manifest), "-o", str(out), "--model",
                                 str(checkpoint), "--device", "cpu", "--dtype", "float32",
                                 "--speaker", "vivian", "--max-new-tokens", str(BUDGET),
                                 "--save-codes", *policy])  # fmt: skip
    assert r.exit_code in (0, 3), r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    rows = {x["id"]: x for x in pq.read_table(out / "results.parquet").to_pylist()}
    return r, summary, rows


def _files(out) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("*.wav")}


def check_retried(out, rows: dict, oracle, n: int) -> None:
    """Each row as retry/n makes it: the try it kept, or a failure naming the n tries."""
    for i in ROWS:
        row, k = rows[f"r{i}"], kept(oracle, i, n)
        if k is None:
            assert row["status"] == "failed" and row["attempts"] == n, i
            assert f"hit the frame budget without EOS in {n} attempts" in row["error"], i
            assert f"--on-budget retry --max-attempts {n}" in row["error"], i
            assert row["kept_seed"] is None and all(row[m] is None for m in MEASURES), i
            continue
        assert row["status"] == "ok", (i, row["error"])
        assert (row["attempts"], row["kept_seed"]) == (k, attempt_seed(i, k)), i
        assert row["hit_frame_budget"] is False and row["segment_seeds"] is None, i
        np.testing.assert_array_equal(np.load(out / f"r{i}.codes.npy"), oracle[i, k].codes)


def check_flagged_first_tries(out, rows: dict, oracle) -> None:
    """Each row as ok makes it: its first try, flagged when it hit the budget."""
    for i in ROWS:
        row, first = rows[f"r{i}"], oracle[i, 1]
        assert row["status"] == "ok", (i, row["error"])
        assert (row["attempts"], row["kept_seed"]) == (1, i), i
        assert row["hit_frame_budget"] is first.hit_frame_budget, i
        np.testing.assert_array_equal(np.load(out / f"r{i}.codes.npy"), first.codes)


def assert_measures_close(got: dict, want: dict, samples: int) -> None:
    """The measures of two decodes of the same codes: equal but for the audio's rounding."""
    assert got["peak"] == pytest.approx(want["peak"], abs=PEAK_TOL)
    assert got["rms_dbfs"] == pytest.approx(want["rms_dbfs"], abs=DB_TOL)
    frames = samples // round(SILENCE_FRAME_S * SAMPLE_RATE)
    assert got["silence_ratio"] == pytest.approx(want["silence_ratio"],
                                                 abs=SILENT_FRAMES_TOL / frames)  # fmt: skip
    assert (got["repeat_ratio"], got["chars_per_s"]) == (want["repeat_ratio"], want["chars_per_s"])


def test_the_aim_gives_every_case(oracle):
    """The rows must stop at once, after a retry, and not within 3 tries but within 4, or the
    tests below show less than they claim."""
    assert {kept(oracle, i, 3) for i in ROWS} >= {1, 2, None}
    assert {kept(oracle, i, TRIES) for i in ROWS if kept(oracle, i, 3) is None} == {TRIES}


def test_retry_records_the_kept_try_and_the_measures(checkpoint, oracle, manifest, tmp_path):
    out = tmp_path / "out"
    r, summary, rows = batch(checkpoint, manifest, out, "--on-budget", "retry")
    failing = [i for i in ROWS if kept(oracle, i, 3) is None]
    assert r.exit_code == 3 and (summary["ok"], summary["failed"]) == (
        len(ROWS) - len(failing), len(failing))  # fmt: skip
    assert summary["hit_frame_budget"] == 0  # a kept row stopped by EOS
    check_retried(out, rows, oracle, 3)
    for i in set(ROWS) - set(failing):
        row, want = rows[f"r{i}"], oracle[i, kept(oracle, i, 3)]
        codes = np.load(out / f"r{i}.codes.npy")
        assert row["repeat_ratio"] == repeat_ratio(codes[:, 0])  # codes exact: the measure too
        text_chars = len(f"Line number {i}.".replace(" ", ""))
        assert row["chars_per_s"] == pytest.approx(text_chars / row["duration_s"], rel=RATE_REL)
        alone = measure(want.audio, want.codes, f"Line number {i}.", want.sample_rate)
        assert_measures_close(row, alone, row["num_samples"])


def test_resume_redoes_exactly_what_the_policy_change_changes(checkpoint, oracle, manifest,
                                                              tmp_path):  # fmt: skip
    out = tmp_path / "out"
    ok3 = [i for i in ROWS if kept(oracle, i, 3) is not None]
    batch(checkpoint, manifest, out, "--on-budget", "retry")
    before = _files(out)

    # The same policy: every done row is skipped, untouched; a failed row is tried again (as
    # after any failure) and fails the same way.
    r, summary, rows = batch(checkpoint, manifest, out, "--on-budget", "retry")
    assert (summary["skipped"], summary["ok"]) == (len(ok3), 0)
    assert summary["failed"] == len(ROWS) - len(ok3) and "redoing" not in r.stderr
    assert _files(out) == before
    check_retried(out, rows, oracle, 3)

    # More tries: every done row is kept (retry/4 keeps a row kept at try k <= 3); the failed
    # row gets its 4 tries and stops at the last.
    r, summary, rows = batch(checkpoint, manifest, out, "--max-attempts", str(TRIES))
    assert (summary["skipped"], summary["ok"], summary["failed"]) == (
        len(ok3),
        len(ROWS) - len(ok3),
        0,
    )
    assert "redoing" not in r.stderr
    assert {k: v for k, v in _files(out).items() if k in before} == before
    check_retried(out, rows, oracle, TRIES)
    before = _files(out)

    # Fewer tries: only the rows kept at a later try than 2 are redone (and fail after 2).
    r, summary, rows = batch(checkpoint, manifest, out, "--on-budget", "retry",
                             "--max-attempts", "2")  # fmt: skip
    later = [i for i in ROWS if (kept(oracle, i, TRIES) or TRIES + 1) > 2]
    assert later and (summary["skipped"], summary["failed"]) == (len(ROWS) - len(later), len(later))
    assert f"on-budget retry/{TRIES} -> retry/2 ({len(later)})" in r.stderr
    assert all(_files(out)[f"r{i}.wav"] == before[f"r{i}.wav"] for i in ROWS if i not in later)
    check_retried(out, rows, oracle, 2)
    before = _files(out)

    # ok: the rows that stopped at their first try are kept; the others (kept at a later try,
    # or failed) are redone as their first try, flagged: what a fresh run under ok makes.
    r, summary, rows = batch(checkpoint, manifest, out, "--on-budget", "ok")
    first = [i for i in ROWS if not oracle[i, 1].hit_frame_budget]
    assert (summary["skipped"], summary["ok"]) == (len(first), len(ROWS) - len(first))
    assert summary["hit_frame_budget"] == len(ROWS) - len(first)
    assert all(_files(out)[f"r{i}.wav"] == before[f"r{i}.wav"] for i in first)
    check_flagged_first_tries(out, rows, oracle)
    _, _, fresh = batch(checkpoint, manifest, tmp_path / "fresh", "--on-budget", "ok")
    for i in ROWS:  # the same records, but for the out dir and the audio's rounding
        got, want = rows[f"r{i}"], fresh[f"r{i}"]
        exact = set(got) - {"path", *MEASURES}
        assert {k: got[k] for k in exact} == {k: want[k] for k in exact}, i
        assert_measures_close(got, want, want["num_samples"])

    # Back to retry: the flagged rows only are redone, to what retry/3 made the first time,
    # though they now run in another batch (codes are batch-invariant).
    r, summary, rows = batch(checkpoint, manifest, out, "--on-budget", "retry")
    assert summary["skipped"] == len(first)
    assert f"on-budget ok -> retry/3 ({len(ROWS) - len(first)})" in r.stderr
    check_retried(out, rows, oracle, 3)
