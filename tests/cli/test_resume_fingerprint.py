"""A rerun redoes exactly the rows whose output would change (their fingerprint), says why in one
line, and nothing else: seeds, speakers, sampling, format, reference audio content, the model.
The same settings redo nothing and write nothing. Fake model, in process."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import soundfile as sf
from cli_calls import qtts, summary

pytestmark = pytest.mark.usefixtures("fake_model")


def stamps(out) -> dict[str, tuple[int, int]]:
    """Every file of the out dir but the locks (its state in .qtts/ included): inode, mtime."""
    return {str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in out.rglob("*") if p.is_file() and p.suffix != ".lock"}  # fmt: skip


def rewritten(before, after) -> set[str]:
    return {n for n in before.keys() & after.keys() if before[n] != after[n]}


def redo_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if "redoing" in x]
    assert len(lines) == 1, result.stderr
    return lines[0]


ROWS = [{"id": f"u{i}", "text": f"text number {i}", "seed": 10 + i} for i in range(5)]


@pytest.fixture
def done(tmp_path, write_manifest):
    """A finished job: (manifest path, out dir)."""
    m = write_manifest(ROWS)
    out = tmp_path / "out"
    r = qtts("batch", m, "-o", out, "--speaker", "ryan")
    assert r.exit_code == 0 and summary(r)["ok"] == 5, r.stderr
    return m, out


def test_the_same_settings_redo_nothing_and_write_nothing(done):
    m, out = done
    before = stamps(out)
    r = qtts("batch", m, "-o", out, "--speaker", "ryan")
    assert r.exit_code == 0 and (summary(r)["skipped"], summary(r)["ok"]) == (5, 0)
    assert stamps(out) == before  # not one file touched, results.parquet included
    assert "redoing" not in r.stderr


@pytest.mark.parametrize("slice_rows", [1 << 20, 2])
def test_a_changed_seed_redoes_exactly_its_rows(done, write_manifest, monkeypatch, slice_rows):
    from qtts.core.jobs.work import resume

    monkeypatch.setattr(resume, "COMPARE_SLICE", slice_rows)  # one slice, or a slice of two rows
    m, out = done
    before = stamps(out)
    rows = [dict(r, seed=99) if r["id"] in ("u1", "u3") else r for r in ROWS]
    r = qtts("batch", write_manifest(rows), "-o", out, "--speaker", "ryan")
    assert (summary(r)["ok"], summary(r)["skipped"]) == (2, 3)
    assert "seed (2)" in redo_line(r)
    assert {n for n in rewritten(before, stamps(out)) if n.endswith(".wav")} == {"u1.wav", "u3.wav"}
    res = {x["id"]: x for x in pq.read_table(out / "results.parquet").to_pylist()}
    assert res["u1"]["seed"] == 99 and {x["status"] for x in res.values()} == {"ok"}


def test_a_changed_speaker_redoes_the_rows_that_use_it(done, write_manifest):
    m, out = done
    rows = [dict(r, speaker="eric") if r["id"] == "u0" else r for r in ROWS]
    r = qtts("batch", write_manifest(rows), "-o", out, "--speaker", "ryan")
    assert (summary(r)["ok"], summary(r)["skipped"]) == (1, 4) and "speaker (1)" in redo_line(r)
    r = qtts("batch", write_manifest(rows), "-o", out, "--speaker", "vivian")  # the default
    assert (summary(r)["ok"], summary(r)["skipped"]) == (4, 1) and "speaker (4)" in redo_line(r)


@pytest.mark.parametrize(("column", "value"), [("language", "german"), ("instruct", "whisper")])
def test_a_changed_language_or_instruct_redoes_its_row(tmp_path, write_manifest, column, value):
    """Both shape the audio, so both are in the fingerprint (records.INPUT_FIELDS). A 1.7B
    CustomVoice model: the 0.6B drops instruct."""
    out = tmp_path / "out"
    job = ("-o", out, "--speaker", "ryan", "--model", "Qwen3-TTS-12Hz-1.7B-CustomVoice")
    assert summary(qtts("batch", write_manifest(ROWS), *job))["ok"] == 5
    rows = [dict(r, **{column: value if r["id"] == "u2" else None}) for r in ROWS]
    r = qtts("batch", write_manifest(rows), *job)
    assert (summary(r)["ok"], summary(r)["skipped"]) == (1, 4), r.stderr
    assert f"{column} (1)" in redo_line(r)
    res = {x["id"]: x for x in pq.read_table(out / "results.parquet").to_pylist()}
    assert res["u2"][column] == value and res["u1"][column] != value


def test_changed_sampling_or_model_redoes_every_row(done, monkeypatch):
    m, out = done
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--temperature", "0.5")
    assert summary(r)["ok"] == 5 and "talker.temperature 0.9 -> 0.5 (5)" in redo_line(r)
    monkeypatch.setenv("QTTS_FAKE_MAX_NEW_TOKENS", "1000")  # the fake's checkpoint changes
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--temperature", "0.5")
    assert summary(r)["ok"] == 5 and "model (its files changed) (5)" in redo_line(r)


def test_a_new_format_redoes_every_row_and_removes_the_old_files(done):
    m, out = done  # made without codes: asking for them too, every row is made again
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "-f", "flac", "--save-codes")
    assert summary(r)["ok"] == 5  # for its codes: another format alone would only move it
    assert redo_line(r).endswith(": codes file missing (--save-codes writes {id}.codes.npy) (5)")
    assert sorted(p.name for p in out.glob("u*")) == sorted(
        [f"u{i}.flac" for i in range(5)] + [f"u{i}.codes.npy" for i in range(5)]
    )
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "-f", "flac")  # codes no longer asked
    assert summary(r)["skipped"] == 5  # the audio is the same: nothing to redo
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "-f", "wav", "--save-codes")
    assert (summary(r)["ok"], summary(r)["repacked"]) == (0, 5)  # transcoded, not made again
    assert sorted(p.name for p in out.glob("u*")) == sorted(
        [f"u{i}.wav" for i in range(5)] + [f"u{i}.codes.npy" for i in range(5)]
    )


def test_asking_for_codes_redoes_rows_without_them(done):
    m, out = done
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--save-codes")
    assert summary(r)["ok"] == 5 and len(list(out.glob("*.codes.npy"))) == 5
    codes_missing = "codes file missing (--save-codes writes {id}.codes.npy)"
    assert redo_line(r).endswith(f": {codes_missing} (5)")  # the reason names the file
    (out / "u2.codes.npy").unlink()
    (out / "u3.wav").unlink()  # a missing audio file says so, not that codes are missing
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--save-codes")
    assert (summary(r)["ok"], summary(r)["skipped"]) == (2, 3)
    assert redo_line(r).endswith(f": file missing or not as recorded (1), {codes_missing} (1)")


def test_changed_reference_audio_redoes_the_rows_that_clone_it(tmp_path, write_manifest):
    for name in ("a.wav", "b.wav"):
        sf.write(tmp_path / name, [0.1] * 24000, 24000)
    rows = [{"id": f"c{i}", "text": f"clone {i}", "ref_audio": "a.wav" if i < 2 else "b.wav",
             "ref_text": "words"} for i in range(4)]  # fmt: skip
    m = write_manifest(rows)
    out = tmp_path / "out"
    assert summary(qtts("batch", m, "-o", out, "--model", "fake-base"))["ok"] == 4
    sf.write(tmp_path / "b.wav", [0.2] * 24000, 24000)  # same path, new content
    r = qtts("batch", m, "-o", out, "--model", "fake-base")
    assert (summary(r)["ok"], summary(r)["skipped"]) == (2, 2)
    assert "ref_audio or voice file content (2)" in redo_line(r)
    r = qtts("batch", m, "-o", out, "--model", "fake-base", "--x-vector-only")
    assert summary(r)["ok"] == 4 and "ref_text (4)" in redo_line(r)


def test_a_missing_or_damaged_file_is_redone(done):
    m, out = done
    (out / "u0.wav").unlink()
    (out / "u1.wav").write_bytes(b"garbage")
    r = qtts("batch", m, "-o", out, "--speaker", "ryan")
    assert (summary(r)["ok"], summary(r)["skipped"]) == (2, 3)
    assert "file missing or not as recorded (2)" in redo_line(r)


def test_another_input_is_refused_unless_it_moved(done, tmp_path, write_manifest):
    m, out = done
    moved = tmp_path / "moved.parquet"
    m.rename(moved)
    r = qtts("batch", moved, "-o", out, "--speaker", "ryan")
    assert r.exit_code == 2 and f"holds the job of {m}" in r.stderr and "--input-moved" in r.stderr
    r = qtts("batch", moved, "-o", out, "--speaker", "ryan", "--input-moved")
    assert r.exit_code == 0 and summary(r)["skipped"] == 5
    r = qtts("batch", moved, "-o", out, "--speaker", "ryan")  # the new path is recorded now
    assert r.exit_code == 0 and summary(r)["skipped"] == 5


def test_a_copied_out_dir_lists_its_own_files(done, tmp_path):
    """results.parquet's paths are absolute: a rerun in a copy (file times kept, as cp -a and
    copytree keep them) rebuilds the views for the copy."""
    import shutil

    m, out = done
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    r = qtts("batch", m, "-o", copy, "--speaker", "ryan")
    assert r.exit_code == 0 and summary(r)["skipped"] == 5
    paths = pq.read_table(copy / "results.parquet")["path"].to_pylist()
    assert paths == [str(copy.resolve() / f"u{i}.wav") for i in range(5)]


def test_a_moved_input_with_fewer_rows_rebuilds_the_views(done, tmp_path, write_manifest):
    """--input-moved to a file older than the views: its rows are what results.parquet lists."""
    import os

    m, out = done
    fewer = write_manifest(ROWS[:3], name="fewer.parquet")
    os.utime(fewer, ns=(0, 0))  # older than every view
    r = qtts("batch", fewer, "-o", out, "--speaker", "ryan", "--input-moved")
    assert r.exit_code == 0 and summary(r)["total"] == 3
    assert pq.read_table(out / "results.parquet")["id"].to_pylist() == ["u0", "u1", "u2"]
    # the rows it lacks keep their audio, and the run says so
    assert "2 row(s) done by earlier runs are no longer in the input (first: u" in r.stderr
    assert (out / "u3.wav").exists() and (out / "u4.wav").exists()


def test_appending_rows_just_resumes(done, write_manifest):
    m, out = done
    write_manifest([*ROWS, {"id": "u5", "text": "a new row"}])  # same path, one more row
    r = qtts("batch", m, "-o", out, "--speaker", "ryan")
    assert (summary(r)["ok"], summary(r)["skipped"]) == (1, 5) and "redoing" not in r.stderr


def test_overwrite_starts_afresh(done, tmp_path, write_manifest):
    m, out = done
    other = write_manifest([{"id": "z", "text": "another job"}], name="other.parquet")
    r = qtts("batch", other, "-o", out, "--speaker", "ryan", "--overwrite")
    assert r.exit_code == 0 and summary(r)["ok"] == 1
    res = pq.read_table(out / "results.parquet").to_pylist()
    assert [x["id"] for x in res] == ["z"]


def test_dry_run_reports_and_writes_nothing(done, tmp_path, monkeypatch):
    m, out = done
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("QTTS_FAKE_LOAD_FAIL", "1")  # loading weights would fail: it must not
    r = qtts("batch", m, "-o", fresh, "--speaker", "ryan", "--dry-run")
    s = summary(r)
    assert r.exit_code == 0 and s["status"] == "dry-run", r.stderr
    assert (s["to_synthesize"], s["skipped"], s["failed"]) == (5, 0, 0)
    assert s["est_frames"] > 0 and s["memory_plan"].startswith("fake plan: 5 rows")
    assert not fresh.exists()
    before = stamps(out)
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--seed", "1", "--dry-run")
    s = summary(r)
    assert (s["to_synthesize"], s["skipped"], s["redo"]) == (0, 5, 0)  # seeds are per row here
    r = qtts("batch", m, "-o", out, "--speaker", "eric", "--dry-run")
    s = summary(r)
    assert (s["to_synthesize"], s["redo"], s["redo_reasons"]) == (5, 5, {"speaker": 5})
    assert stamps(out) == before


def test_failed_rows_are_said_on_stderr(tmp_path, write_manifest):
    rows = [{"id": "good", "text": "fine"}, {"id": "bad", "text": "x [fail]"},
            {"id": "empty", "text": " "}]  # fmt: skip
    r = qtts("batch", write_manifest(rows), "-o", tmp_path / "out", "--speaker", "ryan")
    assert r.exit_code == 3
    assert "row bad: fake failure for this row" in r.stderr
    assert "row empty: empty text" in r.stderr
    s = summary(r)
    assert s["failure_reasons"] == {"empty text": 1, "fake failure for this row": 1}
    assert "most common failures" in r.stderr.splitlines()[-1]


def test_a_device_that_is_not_there_is_refused_before_anything_is_written(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("hi\n")
    r = qtts("synth", src, "--speaker", "ryan", "-o", tmp_path / "out", "--device", "cuda")
    assert r.exit_code == 2 and "CUDA is not available" in r.stderr
    assert not (tmp_path / "out").exists()


def test_an_out_dir_of_qtts_0_1_is_redone_only_when_asked(tmp_path, write_manifest):
    m, out = write_manifest(ROWS), tmp_path / "out"
    out.mkdir()
    (out / ".qtts-job.json").write_text('{"kind": "batch", "source": "x", "num_shards": 1}')
    (out / ".qtts-journal.jsonl").write_text('{"id": "u0", "status": "ok", "file": "u0.wav"}\n')
    r = qtts("batch", m, "-o", out, "--speaker", "ryan")
    assert r.exit_code == 2 and "written by qtts 0.1" in r.stderr and "--overwrite" in r.stderr
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--overwrite")
    assert r.exit_code == 0 and summary(r)["ok"] == 5
    assert not list(out.glob(".qtts-*"))


def test_a_job_bigger_than_a_chunk_goes_longest_first_a_chunk_at_a_time(tmp_path, monkeypatch):
    """Rows ordered longest first over the whole job, cut into chunks; within a chunk the
    exact estimate orders them again; every row synthesized once."""
    import fakes

    from qtts.core.jobs.contract.spec import (
        JobSpec,
        OutputOptions,
        RowDefaults,
        VoiceOptions,
    )
    from qtts.core.jobs.execution.run import run_job
    from qtts.core.jobs.work import chunks

    monkeypatch.setattr(chunks, "CHUNK_ROWS", 3)
    src = tmp_path / "lines.txt"
    words = [1, 9, 4, 7, 2, 8, 3, 6, 5, 10]
    src.write_text("".join(" ".join(["w"] * n) + "\n" for n in words))
    synth = fakes.FakeSynthesizer()
    spec = JobSpec(kind="synth", source=str(src), output=OutputOptions(tmp_path / "out"),
                   voice=VoiceOptions(RowDefaults(speaker="ryan")))  # fmt: skip
    s = run_job(spec, fakes.open_text_model, lambda *a: synth)
    assert s.exit_code == 0 and s.ok == 10
    by_length = [f"{i + 1:06d}" for i in sorted(range(10), key=lambda i: -words[i])]
    assert synth.calls == [by_length[0:3], by_length[3:6], by_length[6:9], by_length[9:]]
