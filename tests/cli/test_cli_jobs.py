"""qtts synth / batch / info in-process (CliRunner) on the fake model (tests/fakes.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import fakes
import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from cli_calls import results, summary
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.jobs.rows.validation import id_seed
from qtts.core.synthesis.requests import Request, attempt_seed

pytestmark = pytest.mark.usefixtures("fake_model")


def qtts(*args, input=None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def test_synth_writes_files_results_and_summary(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("Hello world.\n\nSecond line.\n")
    out = tmp_path / "out"
    r = qtts("synth", src, "--speaker", "Vivian", "-o", out, "--save-codes", "--seed", "3")
    assert r.exit_code == 0, r.stderr
    s = summary(r)
    assert (s["ok"], s["failed"], s["total"], s["exit_code"]) == (2, 0, 2, 0)
    res = results(out)
    assert sorted(res) == ["000001", "000003"]
    row = res["000003"]
    assert (row["status"], row["text"], row["speaker"], row["seed"]) == ("ok", "Second line.",
                                                                           "vivian", 3)  # fmt: skip
    audio, sr = sf.read(row["path"])
    assert sr == 24000 and len(audio) == row["num_samples"] == row["num_frames"] * 1920
    want = fakes.fake_codes(
        Request(id="x", text="Second line.", row=3, seed=3, max_new_tokens=10**6)
    )
    np.testing.assert_array_equal(np.load(out / "000003.codes.npy"), want)
    meta = [json.loads(x) for x in (out / "metadata.jsonl").read_text().splitlines()]
    assert [m["file_name"] for m in meta] == ["000001.wav", "000003.wav"]


def test_synth_from_stdin_flac(tmp_path):
    out = tmp_path / "out"
    r = qtts("synth", "-", "--speaker", "ryan", "-o", out, "-f", "flac", input="a b\n\nc\n")
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in out.glob("*.flac")) == ["000001.flac", "000003.flac"]


def test_invalid_utf8_exit_2_names_the_line(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_bytes(b"fine\n\nbro\xffken\n")
    r = qtts("synth", src, "--speaker", "ryan", "-o", tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: ") and "line 3" in r.stderr
    assert not (tmp_path / "out").exists()


def test_bad_speaker_for_every_line_is_a_usage_error(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("hello\n")
    r = qtts("synth", src, "--speaker", "nobody", "-o", tmp_path / "out")
    assert r.exit_code == 2 and "unknown speaker 'nobody'" in r.stderr
    assert not (tmp_path / "out").exists()


def test_batch_bad_rows_fail_alone(tmp_path, write_manifest):
    m = write_manifest(
        [
            {"id": "good", "text": "fine words", "speaker": "ryan", "language": "English"},
            {"id": "empty", "text": "  ", "speaker": "ryan", "language": None},
            {"id": "../evil", "text": "escape", "speaker": "ryan", "language": None},
            {"id": "who", "text": "hi", "speaker": "nobody", "language": None},
            {"id": "lang", "text": "hi", "speaker": None, "language": "klingon"},
            {"id": "boom", "text": "x [fail]", "speaker": None, "language": None},
            {"id": "nan", "text": "x [nan]", "speaker": None, "language": None},
        ]
    )
    out = tmp_path / "out"
    r = qtts("batch", m, "-o", out, "--speaker", "vivian")
    assert r.exit_code == 3, r.stderr
    res = results(out)
    assert res["good"]["status"] == "ok" and (out / "good.wav").exists()
    reasons = {k: v["error"] for k, v in res.items() if v["status"] == "failed"}
    assert reasons["empty"] == "empty text"
    assert "path separator" in reasons["../evil"] and not (tmp_path / "evil.wav").exists()
    assert "unknown speaker 'nobody'" in reasons["who"]
    assert "unknown language 'klingon'" in reasons["lang"]
    assert reasons["boom"] == "fake failure for this row"
    assert "non-finite audio" in reasons["nan"] and not (out / "nan.wav").exists()
    assert summary(r)["failed"] == 6


def test_duplicate_ids_exit_2_nothing_written(tmp_path, write_manifest):
    m = write_manifest(
        [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}, {"id": "a", "text": "z"}]
    )
    r = qtts("batch", m, "-o", tmp_path / "out", "--speaker", "ryan")
    assert r.exit_code == 2 and "duplicate id 'a' (rows 1 and 3)" in r.stderr
    assert not (tmp_path / "out").exists()


def test_missing_column_exit_2(tmp_path, write_manifest):
    r = qtts("batch", write_manifest([{"id": "a"}]), "-o", tmp_path / "out")
    assert r.exit_code == 2 and "missing required column(s) text" in r.stderr


def test_model_load_error_is_one_line_exit_1(tmp_path, monkeypatch):
    src = tmp_path / "lines.txt"
    src.write_text("hello\n")
    r = qtts("synth", src, "--model", "missing-model", "-o", tmp_path / "out")
    assert r.exit_code == 1
    assert r.stderr.strip() == "Error: model not found: missing-model (fake)"
    monkeypatch.setenv("QTTS_DEBUG", "1")
    r = qtts("synth", src, "--model", "missing-model", "-o", tmp_path / "out")
    assert r.exit_code == 1 and "Traceback" in r.stderr


def test_weights_load_error_exit_1_results_still_written(tmp_path, monkeypatch, write_manifest):
    monkeypatch.setenv("QTTS_FAKE_LOAD_FAIL", "1")
    m = write_manifest([{"id": "a", "text": "x"}, {"id": "b", "text": ""}])
    r = qtts("batch", m, "-o", tmp_path / "out", "--speaker", "ryan")
    assert r.exit_code == 1 and "Error: cannot load weights (fake)" in r.stderr
    assert results(tmp_path / "out")["b"]["status"] == "failed"


def _mtimes(out):
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("*.wav")}


def test_resume_skips_done_rows_and_redoes_the_rest(tmp_path, write_manifest):
    rows = [{"id": f"u{i}", "text": f"text number {i}"} for i in range(5)]
    m = write_manifest(rows)
    out = tmp_path / "out"
    assert qtts("batch", m, "-o", out, "--speaker", "ryan", "-b", "2").exit_code == 0
    before = _mtimes(out)
    (out / "u1.wav").unlink()
    (out / "u2.wav").write_bytes(b"garbage")
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "-b", "2")
    assert r.exit_code == 0, r.stderr
    s = summary(r)
    assert (s["ok"], s["skipped"]) == (2, 3)
    after = _mtimes(out)
    for name in ("u0.wav", "u3.wav", "u4.wav"):
        assert after[name] == before[name]  # finished files untouched
    res = results(out)
    # A finished row is "ok" in every rebuild; "skipped this run" is a count in the summary.
    assert {k: v["status"] for k, v in res.items()} == {f"u{i}": "ok" for i in range(5)}
    assert all(sf.read(v["path"])[0].size for v in res.values())
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--overwrite")
    assert summary(r)["ok"] == 5
    assert all(_mtimes(out)[n] != before[n] for n in ("u0.wav", "u3.wav"))


def test_changed_text_is_redone(tmp_path, write_manifest):
    out = tmp_path / "out"
    qtts("batch", write_manifest([{"id": "a", "text": "one"}]), "-o", out, "--speaker", "ryan")
    changed = write_manifest([{"id": "a", "text": "two"}])
    dry = qtts("batch", changed, "-o", out, "--speaker", "ryan", "--dry-run")
    assert "1 to redo (text (1))" in dry.stderr  # the dry run's line says why, not only how many
    r = qtts("batch", changed, "-o", out, "--speaker", "ryan")
    assert summary(r)["ok"] == 1 and results(out)["a"]["text"] == "two"


def test_fail_fast_and_max_failures_leave_rows_pending(tmp_path, write_manifest):
    rows = [{"id": f"u{i}", "text": "word [fail]" if i < 3 else "word"} for i in range(6)]
    m = write_manifest(rows)
    r = qtts("batch", m, "-o", tmp_path / "a", "--speaker", "ryan", "-b", "1", "--fail-fast")
    s = summary(r)
    assert r.exit_code == 3 and s["status"] == "aborted" and s["failed"] == 1 and s["pending"] > 0
    r = qtts(
        "batch", m, "-o", tmp_path / "b", "--speaker", "ryan", "-b", "1", "--max-failures", "3"
    )
    s = summary(r)
    assert r.exit_code == 3 and s["failed"] == 3
    r = qtts("batch", m, "-o", tmp_path / "c", "--speaker", "ryan", "-b", "1")
    assert summary(r)["failed"] == 3 and summary(r)["ok"] == 3


@pytest.mark.parametrize("mode, status, code", [("ok", "ok", 0), ("fail", "failed", 3)])
def test_on_budget(tmp_path, write_manifest, mode, status, code):
    m = write_manifest([{"id": "a", "text": "runs on [runaway]"}])
    r = qtts("batch", m, "-o", tmp_path / "out", "--speaker", "ryan", "--on-budget", mode)
    assert r.exit_code == code
    row = results(tmp_path / "out")["a"]
    assert row["status"] == status
    if mode == "ok":
        assert row["hit_frame_budget"] is True and "whole frame budget" in r.stderr
        assert summary(r)["hit_frame_budget"] == 1
        # a rerun that makes nothing still counts the row, but does not warn of it again
        r = qtts("batch", m, "-o", tmp_path / "out", "--speaker", "ryan", "--on-budget", mode)
        assert r.exit_code == 0 and summary(r)["skipped"] == 1
        assert summary(r)["hit_frame_budget"] == 1 and "whole frame budget" not in r.stderr
    else:
        assert "hit the frame budget" in row["error"]


RUNAWAYS = [{"id": "once", "text": "runs on [runaway:1]"}, {"id": "always", "text": "on [runaway]"},
            {"id": "fine", "text": "stops"}]  # fmt: skip


def test_batch_retries_by_default_under_the_automatic_budget(tmp_path, write_manifest):
    r = qtts("batch", write_manifest(RUNAWAYS), "-o", tmp_path / "out", "--speaker", "ryan")
    assert r.exit_code == 3 and (summary(r)["ok"], summary(r)["failed"]) == (2, 1)
    res = results(tmp_path / "out")
    once = attempt_seed(id_seed("once"), 2)  # no seed given: the row's id's
    assert (res["once"]["attempts"], res["once"]["kept_seed"]) == (2, once)
    assert res["once"]["hit_frame_budget"] is False
    assert (res["fine"]["attempts"], res["fine"]["kept_seed"]) == (1, id_seed("fine"))
    assert res["always"]["attempts"] == 3 and res["always"]["error"].startswith(
        "hit the frame budget without EOS in 3 attempts")  # fmt: skip
    assert res["always"]["error"].endswith("; --on-budget retry --max-attempts 3)")


@pytest.mark.parametrize("command", ["batch --max-new-tokens 40", "synth"])
def test_keeping_flagged_rows_stays_the_default_elsewhere(tmp_path, write_manifest, command):
    """An explicit --max-new-tokens is a cut the user chose; qtts synth keeps such rows too."""
    sub, *flags = command.split()
    src = write_manifest(RUNAWAYS)
    if sub == "synth":
        src = tmp_path / "lines.txt"
        src.write_text("\n".join(row["text"] for row in RUNAWAYS) + "\n")
    r = qtts(sub, src, *flags, "-o", tmp_path / "out", "--speaker", "ryan")
    assert r.exit_code == 0 and summary(r)["hit_frame_budget"] == 2, r.stderr
    assert {v["attempts"] for v in results(tmp_path / "out").values()} == {1}


def test_max_attempts_alone_means_retry_and_greedy_fails_at_once(tmp_path, write_manifest):
    m = write_manifest([{"id": "twice", "text": "runs on [runaway:2]"}])
    r = qtts("batch", m, "-o", tmp_path / "a", "--speaker", "ryan", "--max-new-tokens", "40",
             "--max-attempts", "2")  # fmt: skip
    error = results(tmp_path / "a")["twice"]["error"]
    assert r.exit_code == 3 and "in 2 attempts" in error and "--max-attempts 2)" in error
    r = qtts("batch", m, "-o", tmp_path / "b", "--speaker", "ryan", "--greedy",
             "--temperature", "0.7", "--subtalker-top-k", "5")  # fmt: skip
    row = results(tmp_path / "b")["twice"]  # another seed would give the same codes
    assert r.exit_code == 3 and row["attempts"] == 1
    assert "greedy decoding: a retry would repeat it" in row["error"]
    assert "in 1 attempt" not in row["error"], row["error"]
    assert "retry with greedy decoding" in r.stderr
    idle = [line for line in r.stderr.splitlines() if "change(s) nothing" in line]
    assert len(idle) == 1 and "--temperature, --subtalker-top-k" in idle[0], r.stderr
    assert "--greedy" in idle[0]


@pytest.mark.parametrize("flags, message", [
    (["--on-budget", "ok", "--max-attempts", "2"], "--max-attempts applies to --on-budget retry"),
    (["--max-attempts", "0"], "--max-attempts"),
])  # fmt: skip
def test_max_attempts_misused_exit_2(tmp_path, write_manifest, flags, message):
    m = write_manifest([{"id": "a", "text": "x"}])
    r = qtts("batch", m, "-o", tmp_path / "out", "--speaker", "ryan", *flags)
    assert r.exit_code == 2 and message in r.stderr
    assert not (tmp_path / "out").exists()


def test_max_new_tokens_is_exact(tmp_path, write_manifest):
    m = write_manifest([{"id": "a", "text": " ".join(["long"] * 50)}])
    r = qtts("batch", m, "-o", tmp_path / "out", "--speaker", "ryan", "--max-new-tokens", "5")
    row = results(tmp_path / "out")["a"]
    assert r.exit_code == 0 and row["num_frames"] == 4 and row["hit_frame_budget"] is True


def test_disk_full_is_fatal_and_rows_stay_pending(tmp_path, write_manifest, monkeypatch):
    from qtts.core.jobs.output.stores.formats import files as writer  # the files layout's writes

    real = writer.atomic_write_bytes
    calls = {"n": 0}

    def flaky(path, data, *rest):
        if path.suffix == ".wav":
            calls["n"] += 1
            if calls["n"] > 2:
                raise OSError(28, "No space left on device")
        return real(path, data, *rest)

    m = write_manifest([{"id": f"u{i}", "text": f"w {i}"} for i in range(6)])
    out = tmp_path / "out"
    monkeypatch.setattr(writer, "atomic_write_bytes", flaky)
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "-b", "2")
    assert r.exit_code == 1 and "Error: disk full writing" in r.stderr
    res = results(out)
    assert all(v["status"] == "ok" for v in res.values()) and len(res) == 2
    assert not [p for p in out.iterdir() if ".qtts-tmp-" in p.name]
    monkeypatch.setattr(writer, "atomic_write_bytes", real)
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "-b", "2")
    assert r.exit_code == 0 and (summary(r)["ok"], summary(r)["skipped"]) == (4, 2)


def test_bad_option_values_exit_2(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("hi\n")
    r = qtts("synth", src, "--speaker", "ryan", "--top-p", "1.5", "-o", tmp_path / "out")
    assert r.exit_code == 2 and "top-p" in r.stderr
    r = qtts("synth", src, "--batch-size", "0")
    assert r.exit_code == 2
    r = qtts("synth", src, "--speaker", "ryan", "--device", "gpu", "-o", tmp_path / "out")
    assert r.exit_code == 2 and "--device must be" in r.stderr
    assert not (tmp_path / "out").exists()


def test_info_human_and_json():
    r = qtts("info", "fake-1.7b")
    assert r.exit_code == 0 and "speakers: eric, ryan, vivian" in r.stdout
    assert "languages: auto, chinese, english, german" in r.stdout
    d = json.loads(qtts("info", "fake-0.6b", "--json").stdout)
    assert d["size"].startswith("0.6B layout, custom dimensions")  # the fake is not 0.6B-sized
    assert d["talker_sampling"]["repetition_penalty"] == 1.05
    assert d["instruct"].startswith("ignored")
    r = qtts("info", "missing")
    assert r.exit_code == 1 and r.stderr.startswith("Error: model not found")


def test_stale_temp_files_are_removed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".000001.wav.qtts-tmp-99-1").write_bytes(b"half")
    src = tmp_path / "lines.txt"
    src.write_text("hi\n")
    assert qtts("synth", src, "--speaker", "ryan", "-o", out).exit_code == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [".qtts", "000001.wav", "README.md", "metadata.jsonl", "results.parquet"]
    state = sorted(p.name for p in (out / ".qtts").iterdir())
    assert state == ["job.json", "job.lock", "results.lock", "run.lock", "settings.json",
                     "state.parquet"]  # fmt: skip


def test_a_signal_while_the_card_is_written_waits_for_it(tmp_path, monkeypatch):
    """Ctrl-C as a finished run writes its dataset card: the card is still written, the run's
    summary line still ends stderr, and the exit code is the job's (without the wait, the
    signal cut the card and the summary line, and the process exited 130 after a JSON that
    said 0)."""
    import os
    import signal

    from qtts.core.quality import dataset_card

    real = dataset_card.refresh_card

    def interrupted(out_dir):
        # only where a handler waits for the card: the default one would stop pytest itself
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        os.kill(os.getpid(), signal.SIGINT)
        return real(out_dir)

    monkeypatch.setattr(dataset_card, "refresh_card", interrupted)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    src, out = tmp_path / "lines.txt", tmp_path / "out"
    src.write_text("hi\n")
    try:
        r = qtts("synth", src, "--speaker", "ryan", "-o", out)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    assert r.exit_code == 0, r.output
    assert "SIGINT received" in r.stderr and (out / "README.md").is_file()
    assert r.stderr.splitlines()[-1].endswith("done: 1 ok, 0 failed, 0 skipped, 0 pending; "
                                              f"results in {out / 'results.parquet'}")  # fmt: skip


def test_run_job_streams_longest_first_and_tolerates_any_completion_order(tmp_path, write_manifest):
    """One synthesize call with the whole job, longest first: the engine keeps --batch-size slots
    busy and refills each as it frees (continuous batching)."""
    from qtts.core.jobs.contract.spec import (
        JobSpec,
        ModelOptions,
        OutputOptions,
        RowDefaults,
        VoiceOptions,
    )
    from qtts.core.jobs.execution.run import run_job

    texts = ["a", "a b c d e", "a b", "a b c d e f g h", "a b c"]
    m = write_manifest([{"id": f"r{i}", "text": t} for i, t in enumerate(texts)])
    synth = fakes.FakeSynthesizer()
    spec = JobSpec(kind="batch", source=str(m), output=OutputOptions(tmp_path / "out"),
                   model=ModelOptions(batch_size=2),
                   voice=VoiceOptions(RowDefaults(speaker="ryan")))  # fmt: skip
    s = run_job(spec, fakes.open_text_model, lambda *a: synth)
    assert s.exit_code == 0 and s.ok == 5
    assert synth.calls == [["r3", "r1", "r4", "r2", "r0"]]  # longest first, one stream


def test_the_log_names_the_device_auto_picked(tmp_path, caplog):
    src = tmp_path / "lines.txt"
    src.write_text("Hello world.\n")
    caplog.set_level("INFO", logger="qtts")
    r = qtts("synth", src, "--speaker", "vivian", "-o", tmp_path / "out", "--device", "auto")
    assert r.exit_code == 0, r.stderr
    loading = [m for m in caplog.messages if m.startswith("loading ")]
    assert loading and loading[0].endswith(" on cpu"), loading


def test_a_bad_voice_names_the_flags_the_user_gave(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("Hello world.\n")
    r = qtts("synth", src, "--speaker", "nobody", "-o", tmp_path / "a")
    assert r.exit_code == 2 and "(given by --speaker)" in r.stderr and "set it with" not in r.stderr
    r = qtts("synth", src, "-o", tmp_path / "b")  # no speaker for a CustomVoice model
    assert r.exit_code == 2 and "(set it with --speaker/--language)" in r.stderr
    r = qtts("synth", src, "--speaker", "vivian", "--language", "klingon", "-o", tmp_path / "c")
    assert r.exit_code == 2 and "(given by --language)" in r.stderr  # the flag at fault only
    r = qtts("synth", src, "--language", "en", "-o", tmp_path / "d")  # no speaker: not --language
    assert r.exit_code == 2 and "(set it with --speaker/--language)" in r.stderr
    r = qtts("synth", src, "--speaker", "instructor", "--instruct", "calm", "-o", tmp_path / "e")
    assert r.exit_code == 2 and "(given by --speaker)" in r.stderr  # not by --instruct


@pytest.mark.parametrize("tag", ["en", "EN-us", "de_DE"])
def test_a_language_may_be_its_iso_tag(tmp_path, tag):
    src = tmp_path / "lines.txt"
    src.write_text("Hello world.\n")
    r = qtts("synth", src, "--speaker", "vivian", "--language", tag, "-o", tmp_path / "out")
    assert r.exit_code == 0, r.stderr

    language = pq.read_table(tmp_path / "out" / "results.parquet")["language"].to_pylist()
    assert language == [{"en": "english", "de": "german"}[tag[:2].lower()]]


@pytest.mark.parametrize("flags, why", [(0, "permission denied"), (1, "read-only file system")])
def test_an_out_dir_that_cannot_be_written_says_why(tmp_path, monkeypatch, flags, why):
    import os

    from qtts.core.jobs.execution import out_dir as out_dir_module

    real_statvfs = os.statvfs
    monkeypatch.setattr(out_dir_module.os, "access", lambda path, mode: False)
    monkeypatch.setattr(
        out_dir_module.os,
        "statvfs",
        lambda path: SimpleNamespace(f_flag=real_statvfs(path).f_flag | os.ST_RDONLY * flags),
    )
    src = tmp_path / "lines.txt"
    src.write_text("Hello world.\n")
    r = qtts("synth", src, "--speaker", "vivian", "-o", tmp_path / "out")
    assert (
        r.exit_code == 2
        and f"cannot write to --out-dir {tmp_path / 'out' / '.qtts'}: {why}" in r.stderr
    )


def test_a_big_jobs_texts_are_read_from_their_spill(tmp_path, write_manifest, monkeypatch):
    """A run of at least text_spill.SPILL_ROWS rows maps its texts from OUT/.qtts/ (lowered
    here to every run): the rows it synthesizes and records read them from there, and nothing
    is left in the folder."""
    from qtts.core.jobs.execution import locked_run
    from qtts.core.jobs.rows import validation as text_spill

    monkeypatch.setattr(text_spill, "SPILL_ROWS", 1)
    spills = []

    def spilled(table, folder):
        spills.append(folder)
        return text_spill.spilled(table, folder)

    monkeypatch.setattr(locked_run, "spilled", spilled)
    rows = [{"id": f"u{i}", "text": f"text number {i} " * (i + 1)} for i in range(5)]
    m = write_manifest(rows)
    out = tmp_path / "out"
    assert qtts("batch", m, "-o", out, "--speaker", "ryan", "-b", "2").exit_code == 0
    (out / "u3.wav").unlink()
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "-b", "2")
    assert r.exit_code == 0, r.stderr
    assert (summary(r)["ok"], summary(r)["skipped"]) == (1, 4) and len(spills) == 2
    assert {k: v["text"] for k, v in results(out).items()} == {r["id"]: r["text"] for r in rows}
    assert not [p for p in (out / ".qtts").iterdir() if p.name.startswith(".text-")]
