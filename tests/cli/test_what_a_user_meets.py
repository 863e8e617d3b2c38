"""What a user meets, through the real console script (a subprocess, the fake model): every
failure said on the terminal in one line with the right exit code, nothing created when the input
was refused, help in panels, --version, and the progress heartbeat off a terminal."""

from __future__ import annotations

import json
import re
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fakes import fake_env, qtts_cmd


def run(*args, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    return subprocess.run(qtts_cmd(*args), capture_output=True, text=True, env=fake_env(**env),
                          timeout=timeout)  # fmt: skip


def one_error(proc) -> str:
    """The stderr's only `Error:` line; never a traceback or a usage block."""
    errors = [x for x in proc.stderr.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Usage:" not in proc.stderr, proc.stderr
    return errors[0]


def summary(proc) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_failed_rows_say_why_on_stderr(tmp_path, write_manifest):
    rows = [{"id": "good", "text": "fine"}, {"id": "bad", "text": "x [fail]"},
            {"id": "blank", "text": "  "}, {"id": "nan", "text": "y [nan]"}]  # fmt: skip
    p = run("batch", write_manifest(rows), "-o", tmp_path / "out", "--speaker", "ryan")
    assert p.returncode == 3
    for line in ("row bad: fake failure for this row", "row blank: empty text",
                 "row nan: non-finite audio"):  # fmt: skip
        assert line in p.stderr
    s = summary(p)
    assert s["failed"] == 3 and "empty text" in s["failure_reasons"]
    assert "most common failures" in p.stderr.strip().splitlines()[-1]


def test_an_explicit_budget_still_has_to_fit_the_model(tmp_path, write_manifest):
    huge = " ".join(["w"] * 40_000)  # 40k text tokens: past the model's 32768 positions
    rows = [{"id": "huge", "text": huge}, {"id": "fine", "text": "a few words"}]
    # --split none: split into segments, each segment would fit.
    p = run("batch", write_manifest(rows), "-o", tmp_path / "out", "--speaker", "ryan",
            "--max-new-tokens", 8, "--split", "none")  # fmt: skip
    assert p.returncode == 3 and (summary(p)["ok"], summary(p)["failed"]) == (1, 1)
    assert "row huge: text too long for the model" in p.stderr


def test_a_row_with_no_audio_fails_instead_of_writing_an_empty_file(tmp_path, write_manifest):
    p = run("batch", write_manifest([{"id": "a", "text": "hello"}]), "-o", tmp_path / "out",
            "--speaker", "ryan", "--max-new-tokens", 1)  # fmt: skip
    assert p.returncode == 3 and "row a: no audio" in p.stderr
    assert not (tmp_path / "out" / "a.wav").exists()


def test_status_is_ok_in_every_rebuild(tmp_path, write_manifest):
    m, out = (
        write_manifest([{"id": f"u{i}", "text": f"line {i}"} for i in range(3)]),
        tmp_path / "o",
    )
    assert run("batch", m, "-o", out, "--speaker", "ryan").returncode == 0
    p = run("batch", m, "-o", out, "--speaker", "ryan")  # a resumed run: all skipped
    assert summary(p)["skipped"] == 3
    assert {r["status"] for r in pq.read_table(out / "results.parquet").to_pylist()} == {"ok"}
    p = run("results", out)
    assert p.returncode == 0 and json.loads(p.stdout.splitlines()[-1])["ok"] == 3
    assert {r["status"] for r in pq.read_table(out / "results.parquet").to_pylist()} == {"ok"}


JOB = ["-o", "{out}", "--speaker", "ryan"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["batch", "{tmp}/nope.parquet", *JOB], "manifest {tmp}/nope.parquet: no such file"),
        (["results", "{out}"], "no qtts job"),
        (["batch", "{m}", *JOB, "--num-shards", "0"], "'--num-shards'"),
        (["batch", "{m}", *JOB, "--shard-index", "-1"], "'--shard-index'"),
        (["batch", "{m}", *JOB, "--batch-size", "0"], "--batch-size '0'"),
        (["batch", "{m}", *JOB, "--device", "cuda"], "CUDA is not available"),
        (["batch", "{m}", *JOB, "--bogus"], "No such option: --bogus"),
        (["batch", "{m}", *JOB, "--output", "tar"], "'--output': 'tar' is not one of 'files'"),
        (["batch", "{m}", *JOB, "--split", "none", "--max-segment-tokens", "20"],
         "--split none cuts none"),
        (["bench", "--frames", "0"], "'--frames'"),
        (["bench", "--requests", "-1"], "'--requests'"),
    ],
)  # fmt: skip
def test_refused_command_lines_are_one_line_and_create_nothing(tmp_path, write_manifest, args,
                                                               says):  # fmt: skip
    fill = {"tmp": tmp_path, "m": write_manifest([{"id": "a", "text": "x"}]),
            "out": tmp_path / "out"}  # fmt: skip
    p = run(*[a.format(**fill) for a in args])
    assert p.returncode == 2 and says.format(**fill) in one_error(p)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("command", "content", "says"),
    [
        ("synth", b"", "has no rows (no non-blank line)"),
        ("synth", b"\n  \n\t\n", "has no rows (no non-blank line)"),
        ("batch", None, "has no rows"),
    ],
)
def test_an_empty_input_is_refused_and_the_out_dir_left_alone(tmp_path, write_manifest, command,
                                                              content, says):  # fmt: skip
    if content is None:
        schema = pa.schema([("id", pa.string()), ("text", pa.string())])
        src = write_manifest([], schema=schema)
    else:
        src = tmp_path / "lines.txt"
        src.write_bytes(content)
    out = tmp_path / "out"
    out.mkdir()  # made for the job: it must not be taken over by an input with nothing in it
    p = run(command, src, "-o", out, "--speaker", "ryan")
    assert p.returncode == 2 and one_error(p) == f"Error: {src} {says}: nothing to do"
    assert list(out.iterdir()) == []
    p = run(command, src, "-o", tmp_path / "fresh", "--speaker", "ryan", "--dry-run")
    assert p.returncode == 2 and says in one_error(p) and not (tmp_path / "fresh").exists()


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"QTTS_LAYER_PATH": "turbo"}, "QTTS_LAYER_PATH must be one of module, packed, fused"),
        ({"QTTS_SAMPLER": "cuda"}, "QTTS_SAMPLER must be one of auto, torch, triton"),
        ({"QTTS_FUSED": "1"}, "QTTS_FUSED is retired: set QTTS_LAYER_PATH"),
    ],
)
def test_a_bad_knob_is_refused_before_anything_is_created(tmp_path, write_manifest, env, says):
    m = write_manifest([{"id": "a", "text": "x"}])
    p = run("batch", m, "-o", tmp_path / "out", "--speaker", "ryan", **env)
    assert p.returncode == 2 and says in one_error(p)
    assert not (tmp_path / "out").exists()


def test_an_out_dir_that_cannot_be_made_is_a_usage_error(tmp_path, write_manifest):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    p = run("batch", write_manifest([{"id": "a", "text": "x"}]), "-o", blocker / "out",
            "--speaker", "ryan")  # fmt: skip
    assert p.returncode == 2 and "cannot create --out-dir" in one_error(p)


def test_help_has_panels_and_the_exit_codes():
    p = subprocess.run(qtts_cmd("batch", "--help"), capture_output=True, text=True,
                       env=fake_env(COLUMNS="120"), timeout=60)  # fmt: skip
    assert p.returncode == 0
    for panel in ("Model and engine", "Voice", "Sampling", "Output", "Input and resume",
                  "Scale out", "Failures and logging", "Exit codes:"):  # fmt: skip
        assert panel in p.stdout, panel
    assert "Talker temperature" in p.stdout  # the sampling options say what they do


def test_version_says_what_it_runs_on():
    p = run("--version")
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert lines[0].startswith("qtts ") and any(x.startswith("torch ") for x in lines)
    assert any(x.startswith("device ") for x in lines)


def test_off_a_terminal_progress_is_a_heartbeat_from_the_start(tmp_path, write_manifest):
    rows = [{"id": f"u{i}", "text": f"line {i} [slow]"} for i in range(2)]
    p = run("batch", write_manifest(rows), "-o", tmp_path / "out", "--speaker", "ryan",
            "--log-interval", 1, QTTS_FAKE_SLOW="1.6")  # fmt: skip
    assert p.returncode == 0
    beats = [x for x in p.stderr.splitlines() if "progress:" in x]
    assert beats and "0/2 rows" in beats[0]  # before the first row finished


def log_line(stderr: str, says: str) -> str:
    """The stderr line saying `says`, which reads as every log line does: time, qtts, level."""
    (line,) = [x for x in stderr.splitlines() if says in x]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d qtts WARNING: ", line), line
    return line


def test_shard_rows_with_the_files_layout_is_said_to_do_nothing(tmp_path, write_manifest):
    m = write_manifest([{"id": "a", "text": "x"}])
    p = run("batch", m, "--speaker", "ryan", "-o", tmp_path / "out", "--shard-rows", "5")
    assert p.returncode == 0
    log_line(p.stderr, "--shard-rows 5 does nothing with --output files")  # logged as any line
    p = run("batch", m, "--speaker", "ryan", "-o", tmp_path / "wds", "--output", "webdataset",
            "--shard-rows", "5")  # fmt: skip
    assert p.returncode == 0 and "does nothing" not in p.stderr


def test_sampling_flags_beside_greedy_are_said_to_change_nothing(tmp_path, write_manifest):
    """Said, not refused: a job begun with them keeps them in its fingerprint, and refusing
    would make its owner drop them and redo every row for the same audio."""
    m = write_manifest([{"id": "a", "text": "x"}])
    p = run("batch", m, "--speaker", "ryan", "-o", tmp_path / "out", "--greedy",
            "--temperature", "0.5", "--subtalker-top-k", "5")  # fmt: skip
    assert p.returncode == 0
    assert "--greedy takes the argmax: --temperature, --subtalker-top-k change(s) nothing" in (
        p.stderr
    )
