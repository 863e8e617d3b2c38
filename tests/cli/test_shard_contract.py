"""Shards that cannot collide: the out dir pins N; another N (or unsharded beside sharded) is
refused while the first runs or after; a partly resubmitted Slurm array keeps the recorded N; a
finished shard never fails because another process holds the results lock. Fake model."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time

import pytest
from cli_calls import summary
from fakes import fake_env, qtts_cmd
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.jobs.execution import locked_run

pytestmark = pytest.mark.usefixtures("fake_model")


def qtts(*args, env=None):
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


@pytest.fixture
def manifest(write_manifest):
    return write_manifest([{"id": f"u{i:02d}", "text": f"sentence {i}"} for i in range(12)])


def test_another_shard_count_is_refused(manifest, tmp_path):
    out = tmp_path / "out"
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", "--num-shards", 2,
             "--shard-index", 0)  # fmt: skip
    assert r.exit_code == 0, r.stderr
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", "--num-shards", 3,
             "--shard-index", 0)  # fmt: skip
    assert r.exit_code == 2 and "split into 2 shards" in r.stderr and "--num-shards 2" in r.stderr
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan")
    assert r.exit_code == 2 and "--num-shards 2 --shard-index 0..1" in r.stderr
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", "--num-shards", 2,
             "--shard-index", 1)  # fmt: skip
    assert r.exit_code == 0
    r = qtts("results", out)
    assert r.exit_code == 0 and json.loads(r.stdout.splitlines()[-1])["complete"]


def test_a_sharded_run_is_refused_on_an_unsharded_out_dir(manifest, tmp_path):
    out = tmp_path / "out"
    assert qtts("batch", manifest, "-o", out, "--speaker", "ryan").exit_code == 0
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", "--num-shards", 4,
             "--shard-index", 0)  # fmt: skip
    assert r.exit_code == 2 and "split into 1 shard " in r.stderr


def test_runs_with_different_counts_cannot_run_at_once(manifest, tmp_path, write_manifest):
    slow = write_manifest([{"id": f"u{i:02d}", "text": f"sentence {i} [slow]"} for i in range(12)])
    out, mark = tmp_path / "out", tmp_path / "busy"
    proc = subprocess.Popen(
        qtts_cmd("batch", slow, "-o", out, "--speaker", "ryan", "--num-shards", 2, "--shard-index",
                 0),
        env=fake_env(QTTS_FAKE_SLOW="30", QTTS_FAKE_MARK=str(mark)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists()
        r = qtts("batch", slow, "-o", out, "--speaker", "ryan")  # unsharded beside it
        assert r.exit_code == 2 and "split into 2 shards" in r.stderr
        r = qtts("batch", slow, "-o", out, "--speaker", "ryan", "--num-shards", 3,
                 "--shard-index", 1)  # fmt: skip
        assert r.exit_code == 2
        r = qtts("batch", slow, "-o", out, "--speaker", "ryan", "--num-shards", 3,
                 "--shard-index", 1, "--overwrite")  # fmt: skip
        assert r.exit_code == 2 and "while another run holds" in r.stderr
    finally:
        proc.kill()
        proc.wait()


def test_overwrite_changes_the_shard_count_when_nothing_else_runs(manifest, tmp_path):
    out = tmp_path / "out"
    for i in range(2):
        qtts("batch", manifest, "-o", out, "--speaker", "ryan", "--num-shards", 2,
             "--shard-index", i)  # fmt: skip
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", "--overwrite")
    assert r.exit_code == 0 and summary(r)["ok"] == 12
    assert sorted(p.name for p in (out / ".qtts").glob("state*")) == ["state.parquet"]


SLURM = {"SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "1"}


def test_a_partly_resubmitted_array_keeps_the_recorded_count(manifest, tmp_path):
    out = tmp_path / "out"
    for task in range(4):  # sbatch --array=0-3
        env = {**SLURM, "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": str(task)}
        assert qtts("batch", manifest, "-o", out, "--speaker", "ryan", env=env).exit_code == 0
    (out / "u00.wav").unlink()  # some shard lost a file; resubmit only its task
    from qtts.core.jobs.state.shards import shard_of

    task = shard_of("u00", 4)
    env = {
        "SLURM_ARRAY_TASK_COUNT": "1",
        "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_ARRAY_TASK_MIN": str(task),
        "SLURM_ARRAY_TASK_STEP": "1",
    }  # --array=T
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", env=env)
    assert r.exit_code == 0, r.stderr
    assert summary(r)["ok"] == 1 and f"as shard {task} of 4" in r.stderr
    remapped = [x for x in r.stderr.splitlines() if f"running task {task} as shard" in x]
    assert len(remapped) == 1, r.stderr  # said once, not again when the job lock re-checks it
    env = {
        "SLURM_ARRAY_TASK_COUNT": "2",
        "SLURM_ARRAY_TASK_ID": "3",
        "SLURM_ARRAY_TASK_MIN": "1",
        "SLURM_ARRAY_TASK_STEP": "1",
    }  # --array=1,3
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", env=env)
    assert r.exit_code == 0 and "as shard 3 of 4" in r.stderr
    env["SLURM_ARRAY_TASK_ID"] = "9"  # not a task of the recorded array
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", env=env)
    assert r.exit_code == 2 and "task 9 is not one of them" in r.stderr
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", "--num-shards", 2,
             "--shard-index", 1, env=env)  # explicit flags that disagree  # fmt: skip
    assert r.exit_code == 2


HOLD = """
import sys, time
from filelock import FileLock
with FileLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


@contextlib.contextmanager
def results_lock_held(out):
    (out / ".qtts").mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out / ".qtts" / "results.lock")],
                              stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == b"held"
        yield
    finally:
        holder.kill()
        holder.wait()


def test_a_busy_results_lock_leaves_a_finished_shard_its_exit_code(
    manifest, tmp_path, monkeypatch, write_manifest
):
    monkeypatch.setattr(locked_run, "RESULTS_WAIT_S", 0.5)
    out = tmp_path / "out"
    with results_lock_held(out):
        r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", "--num-shards", 2,
                 "--shard-index", 0)  # fmt: skip
        assert r.exit_code == 0 and summary(r)["pending"] == 0, r.stderr
        assert "being rebuilt by another" in r.stderr and not (out / "results.parquet").exists()
    done = summary(r)["ok"]
    r = qtts("results", out)  # the rebuild left to `qtts results` (or the next finisher)
    counts = json.loads(r.stdout.splitlines()[-1])
    assert r.exit_code == 0 and (counts["ok"], counts["pending"]) == (done, 12 - done)
    bad = write_manifest([{"id": "a", "text": "x [fail]"}, {"id": "b", "text": "y"}], "bad.parquet")
    with results_lock_held(tmp_path / "out2"):
        r = qtts("batch", bad, "-o", tmp_path / "out2", "--speaker", "ryan")
        assert r.exit_code == 3 and (summary(r)["ok"], summary(r)["failed"]) == (1, 1)


def test_a_shard_taken_from_the_environment_is_a_warning_and_in_the_summary(manifest, tmp_path):
    """A Slurm array run on a manifest of its own would do a part of it: said at WARNING, which
    -q keeps, and the summary names the shard; --num-shards 1 runs every row, unsharded."""
    env = {**SLURM, "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "2"}
    r = qtts("batch", manifest, "-o", tmp_path / "a", "--speaker", "ryan", "-q", env=env)
    assert r.exit_code == 0, r.stderr
    assert "qtts WARNING: shard 2 of 4 (from the Slurm array)" in r.stderr
    assert "--num-shards 1 when each task has an input of its own" in r.stderr
    assert summary(r)["shard"] == "shard 2 of 4 (from the Slurm array)"
    assert 0 < summary(r)["total"] < 12
    r = qtts("batch", manifest, "-o", tmp_path / "b", "--speaker", "ryan", "-q",
             "--num-shards", 1, env=env)  # fmt: skip
    assert r.exit_code == 0 and "WARNING: shard" not in r.stderr
    assert summary(r)["total"] == 12
    assert summary(r)["shard"] == "shard 0 of 1 (from --num-shards/--shard-index)"
    r = qtts("batch", manifest, "-o", tmp_path / "c", "--speaker", "ryan", "-q",
             "--num-shards", 2, "--shard-index", 0)  # fmt: skip
    assert "WARNING: shard" not in r.stderr  # asked for by name: no warning
    assert summary(r)["shard"] == "shard 0 of 2 (from --num-shards/--shard-index)"
