"""`--dtype auto` on a CPU does not churn a dataset: the out dir keeps what its first run resolved
(.qtts/job.json cpu_auto_dtype), so a rerun or a shard on a CPU that would pick otherwise redoes
nothing; an explicit --dtype runs as given (its rows redone when the precision differs) and leaves
the pin alone; --overwrite resolves afresh; two runs pinning at once cannot disagree. The "CPU"
is QTTS_CPU_BF16 (1: native bf16, 0: none). Fake model, in process."""

from __future__ import annotations

import json

import pytest
from cli_calls import summary
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.jobs.execution import run as run_module
from qtts.core.jobs.state.jobfile import JobFile, read_job_file, write_job_file

pytestmark = pytest.mark.usefixtures("fake_model")

BF16_CPU, FP32_CPU = {"QTTS_CPU_BF16": "1"}, {"QTTS_CPU_BF16": "0"}
ROWS = [{"id": f"u{i}", "text": f"text number {i}"} for i in range(4)]


def qtts(*args, env):
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def said(result) -> str:
    (line,) = [x for x in result.stderr.splitlines() if "precision: " in x]
    return line.split("precision: ", 1)[1]


def pin(out):
    return json.loads((out / ".qtts" / "job.json").read_text())["cpu_auto_dtype"]


@pytest.fixture
def manifest(write_manifest):
    return write_manifest(ROWS)


def run(manifest, out, env, *more):
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", *more, env=env)
    assert r.exit_code == 0, r.stderr
    return r


def test_the_first_run_pins_bf16_and_an_fp32_cpu_keeps_it(manifest, tmp_path):
    out = tmp_path / "out"
    r = run(manifest, out, BF16_CPU)
    assert summary(r)["ok"] == 4 and pin(out) == "bfloat16"
    assert said(r) == "cpu bfloat16 (--dtype auto: QTTS_CPU_BF16=1)"
    r = run(manifest, out, FP32_CPU)
    assert (summary(r)["skipped"], summary(r)["ok"]) == (4, 0) and "redoing" not in r.stderr
    assert said(r) == (
        "cpu bfloat16 (--dtype auto, as this out dir first resolved it "
        "(.qtts/job.json); this CPU alone would pick float32: QTTS_CPU_BF16=0); this CPU "
        "emulates bf16, slowly (--dtype float32 runs fp32 instead, and redoes the rows made in "
        "bf16)"
    )
    dry = qtts("batch", manifest, "-o", out, "--speaker", "ryan", "--dry-run", env=FP32_CPU)
    assert (summary(dry)["precision"], summary(dry)["skipped"]) == ("cpu:bfloat16", 4)


def test_an_out_dir_from_before_the_pin_counts_as_float32(manifest, tmp_path):
    out = tmp_path / "out"
    run(manifest, out, FP32_CPU)
    job = json.loads((out / ".qtts" / "job.json").read_text())
    del job["cpu_auto_dtype"]  # as a qtts from before the pin wrote it
    (out / ".qtts" / "job.json").write_text(json.dumps(job))
    r = run(manifest, out, BF16_CPU)
    assert (summary(r)["skipped"], summary(r)["ok"]) == (4, 0) and "redoing" not in r.stderr
    assert said(r).startswith("cpu float32 (--dtype auto, as this out dir first resolved it")


def test_an_explicit_dtype_redoes_the_rows_and_leaves_the_pin(manifest, tmp_path):
    out = tmp_path / "out"
    run(manifest, out, BF16_CPU)
    r = run(manifest, out, BF16_CPU, "--dtype", "float32")
    assert summary(r)["ok"] == 4 and "precision cpu:bfloat16 -> cpu:float32 (4)" in r.stderr
    assert said(r) == "cpu float32 (--dtype float32)" and pin(out) == "bfloat16"
    r = run(manifest, out, FP32_CPU)  # auto: the pin again, so the rows are redone in bf16
    assert summary(r)["ok"] == 4 and "precision cpu:float32 -> cpu:bfloat16 (4)" in r.stderr


def test_a_first_run_with_an_explicit_dtype_pins_nothing(manifest, tmp_path):
    out = tmp_path / "out"
    run(manifest, out, BF16_CPU, "--dtype", "bfloat16")
    assert pin(out) is None
    r = run(manifest, out, FP32_CPU)  # the first CPU auto run pins what it resolves
    assert summary(r)["ok"] == 4 and pin(out) == "float32"


def test_overwrite_resolves_afresh(manifest, tmp_path):
    out = tmp_path / "out"
    run(manifest, out, BF16_CPU)
    r = run(manifest, out, FP32_CPU, "--overwrite")
    assert summary(r)["ok"] == 4 and pin(out) == "float32"
    assert said(r) == "cpu float32 (--dtype auto: QTTS_CPU_BF16=0)"


def test_a_pin_recorded_by_another_run_meanwhile_is_refused(manifest, tmp_path, monkeypatch):
    out = tmp_path / "out"
    prepare = run_module.prepare_job

    def racing(spec, *args, **kwargs):  # another run records the out dir in the meantime
        prepared = prepare(spec, *args, **kwargs)
        (out / ".qtts").mkdir(parents=True)
        write_job_file(out, JobFile("batch", str(manifest.resolve()), cpu_auto_dtype="float32"))
        return prepared

    monkeypatch.setattr(run_module, "prepare_job", racing)
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", env=BF16_CPU)
    assert r.exit_code == 2
    assert ("was just recorded with --dtype auto = float32 on CPU by another run; run again to "
            "join it") in r.stderr  # fmt: skip
    assert read_job_file(out).cpu_auto_dtype == "float32" and not list(out.glob("u*"))


def test_a_bad_knob_exits_2_before_anything_is_made(manifest, tmp_path):
    out = tmp_path / "out"
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", env={"QTTS_CPU_BF16": "bad"})
    assert r.exit_code == 2 and not out.exists()
    errors = [x for x in r.stderr.splitlines() if x.strip()]
    assert errors == ["Error: QTTS_CPU_BF16 must be one of auto, 1, 0, got 'bad'"]
