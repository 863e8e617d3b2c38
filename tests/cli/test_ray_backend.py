"""`qtts batch --backend ray` on a local Ray cluster (started once for this module, 4 logical CPUs,
no GPUs), with the tiny checkpoint, sampling on and a seed per row: the same files and codes as a
local run; rows failing in the model fail alone; a killed actor's rows are retried; a driver
killed with SIGKILL is finished by a rerun without touching the files already done; a cluster
without the GPUs asked for fails at once; and without Ray installed the flag says what to do."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from typer.testing import CliRunner

ray = pytest.importorskip("ray")  # in the test extra; a fresh clone's CI installs it

from qtts.cli.app import app  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
PCM_LSB = 1 / 32768


@pytest.fixture(scope="module")
def markers(tmp_path_factory):
    return tmp_path_factory.mktemp("markers")


@pytest.fixture(scope="module")
def cluster(markers):
    """One local Ray for the module. Its workers (for any job, the subprocess drivers' too)
    inherit the environment it starts with: the hooks module on PYTHONPATH, the marker dir."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "QTTS_TEST_MARKERS")}
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), saved["PYTHONPATH"]]))
    os.environ["QTTS_TEST_MARKERS"] = str(markers)
    try:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny", seed=8)


def _manifest(path, texts):
    rows = [{"id": f"u{i:02d}", "text": t, "seed": 50 + i} for i, t in enumerate(texts)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


TEXTS = [f"Row {i} of the ray job." for i in range(10)]
LONG = "A longer row for the ray job, split in two. Its second half is a segment of its own."


def _args(checkpoint, manifest, out, *extra):
    return ["batch", str(manifest), "--model", str(checkpoint), "--device", "cpu", "--speaker",
            "vivian", "--max-new-tokens", "6", "--save-codes", "-o", str(out),
            "--max-segment-tokens", "40", *map(str, extra)]  # fmt: skip


@pytest.fixture
def hooks(monkeypatch):
    monkeypatch.setenv("QTTS_FAKE_SYNTH", "ray_hooks")
    monkeypatch.delenv("QTTS_DEBUG", raising=False)


def _run(*args):
    r = CliRunner().invoke(app, list(args))
    lines = r.stdout.strip().splitlines()
    return r.exit_code, (json.loads(lines[-1]) if lines else {}), r.output


def _outputs(out):
    codes = {p.name: np.load(p) for p in out.glob("*.codes.npy")}
    audio = {p.name: sf.read(p, dtype="float32")[0] for p in out.glob("*.wav")}
    return codes, audio


def _same(a, b):
    (codes_a, audio_a), (codes_b, audio_b) = a, b
    assert sorted(codes_a) == sorted(codes_b) and sorted(audio_a) == sorted(audio_b)
    for k in codes_a:
        np.testing.assert_array_equal(codes_a[k], codes_b[k], err_msg=k)
    for k in audio_a:
        np.testing.assert_allclose(audio_a[k], audio_b[k], rtol=0, atol=PCM_LSB, err_msg=k)


def test_two_workers_give_the_files_and_codes_of_a_local_run(cluster, checkpoint, tmp_path, hooks):
    texts = [*TEXTS, LONG]
    manifest = _manifest(tmp_path / "m.parquet", texts)
    code, local, _ = _run(*_args(checkpoint, manifest, tmp_path / "local"))
    assert code == 0 and local["ok"] == len(texts)
    code, distributed, out = _run(*_args(checkpoint, manifest, tmp_path / "ray"), "--backend",
                                  "ray", "--workers", 2)  # fmt: skip
    assert code == 0 and distributed["ok"] == len(texts), out
    _same(_outputs(tmp_path / "local"), _outputs(tmp_path / "ray"))
    results = pq.read_table(tmp_path / "ray" / "results.parquet").to_pylist()
    assert {r["status"] for r in results} == {"ok"} and len(results) == len(texts)
    assert [r["segments"] for r in results] == [1] * len(TEXTS) + [2]  # the long row, split


def test_bad_rows_fail_alone_with_their_reasons(cluster, checkpoint, tmp_path, hooks):
    texts = [*TEXTS[:4], "FAIL in the model", "   "]  # one fails in the model, one in validation
    manifest = _manifest(tmp_path / "m.parquet", texts)
    code, summary, out = _run(*_args(checkpoint, manifest, tmp_path / "out"), "--backend", "ray",
                              "--workers", 2)  # fmt: skip
    assert code == 3 and summary["ok"] == 4 and summary["failed"] == 2, out
    results = {r["id"]: r for r in pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()}
    assert "simulated failure" in results["u04"]["error"]
    assert "empty" in results["u05"]["error"]


def test_a_killed_worker_has_its_rows_retried(cluster, markers, checkpoint, tmp_path, hooks):
    texts = [*TEXTS[:5], "KILL this actor", *TEXTS[5:8]]
    manifest = _manifest(tmp_path / "m.parquet", texts)
    code, summary, out = _run(*_args(checkpoint, manifest, tmp_path / "out"), "--backend", "ray",
                              "--workers", 2)  # fmt: skip
    assert (markers / "killed-u05").exists()  # the actor did die on its first try
    assert code == 0 and summary["ok"] == len(texts), out


def test_a_driver_killed_mid_job_is_finished_by_a_rerun(cluster, checkpoint, tmp_path):
    manifest = _manifest(
        tmp_path / "m.parquet", [f"SLOW row {i} of a long job." for i in range(24)]
    )
    out = tmp_path / "out"
    env = {**os.environ, "QTTS_FAKE_SYNTH": "ray_hooks", "PYTHONPATH": str(TESTS)}
    cmd = [sys.executable, "-m", "qtts", *_args(checkpoint, manifest, out), "--backend", "ray",
           "--workers", 2, "--ray-address", cluster]  # fmt: skip
    cmd = [str(c) for c in cmd]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if len(_journalled_ok(out)) >= 3:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the job finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(2)  # actors of the dead driver may finish the rows they hold: those count too
    done = _journalled_ok(out)
    before = {name: (out / f"{name}.wav").stat().st_mtime_ns for name in done}
    for wav in out.glob("*.wav"):  # no torn file: every published file decodes
        assert sf.info(str(wav)).frames > 0
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["ok"] + summary["skipped"] == 24 and summary["skipped"] >= len(done)
    for name, mtime in before.items():
        assert (out / f"{name}.wav").stat().st_mtime_ns == mtime, f"{name} was rewritten"
    assert not list(out.glob(".*qtts-tmp-*"))


def _journalled_ok(out) -> set[str]:
    """Rows the actors journalled as ok (each actor has its own journal in the out dir)."""
    done = set()
    for journal in (out / ".qtts").glob("journal-ray-*.jsonl"):
        for line in journal.read_text().splitlines():
            if '"status": "ok"' in line:
                done.add(json.loads(line)["id"])
    return done


def test_every_worker_gets_rows_of_a_small_job(cluster, markers, checkpoint, tmp_path, hooks):
    manifest = _manifest(tmp_path / "m.parquet", [f"PID row {i} of twenty." for i in range(20)])
    code, summary, out = _run(*_args(checkpoint, manifest, tmp_path / "out"), "--backend", "ray",
                              "--workers", 2)  # fmt: skip
    assert code == 0 and summary["ok"] == 20, out
    pids = {p.name.split("-")[1] for p in markers.glob("pid-*-u*")}
    assert len(pids) == 2, pids  # both actors synthesized rows


def test_an_unreachable_address_fails_within_the_timeout(checkpoint, tmp_path):
    manifest = _manifest(tmp_path / "m.parquet", TEXTS[:2])
    out = tmp_path / "out"
    env = {**os.environ, "QTTS_FAKE_SYNTH": "ray_hooks", "PYTHONPATH": str(TESTS)}
    env.pop("RAY_ADDRESS", None)
    for address in ("127.0.0.1:1", "192.0.2.1:6379"):  # refused; unroutable (TEST-NET-1)
        cmd = [sys.executable, "-m", "qtts", *_args(checkpoint, manifest, out), "--backend",
               "ray", "--ray-address", address, "--ray-timeout", "3"]  # fmt: skip
        start = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
        assert proc.returncode == 1 and len(errors) == 1 and address in errors[0], proc.stderr
        assert time.monotonic() - start < 30  # the timeout, plus Python and Ray imports
    assert not out.exists()  # nothing written: no out dir, no lock, no job file


def test_ray_inside_a_sharding_environment_is_refused(checkpoint, tmp_path, hooks, monkeypatch):
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    manifest = _manifest(tmp_path / "m.parquet", TEXTS[:2])
    code, _, output = _run(*_args(checkpoint, manifest, tmp_path / "out"), "--backend", "ray")
    assert code == 2 and "--num-shards 1" in output and not (tmp_path / "out").exists()
    code, summary, output = _run(
        *_args(checkpoint, manifest, tmp_path / "out"),
        "--backend",
        "ray",
        "--num-shards",
        1,
        "--workers",
        1,
    )  # what it advises
    assert code == 0 and summary["ok"] == 2, output


def test_a_cluster_without_the_gpus_asked_for_fails_at_once(cluster, checkpoint, tmp_path, hooks):
    manifest = _manifest(tmp_path / "m.parquet", TEXTS[:2])
    start = time.monotonic()
    code, _, out = _run(*_args(checkpoint, manifest, tmp_path / "out"), "--backend", "ray",
                        "--gpus-per-worker", 1)  # fmt: skip
    assert code == 2 and time.monotonic() - start < 60
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "has 0 GPU(s)" in errors[0]


def test_without_ray_the_backend_says_how_to_install_it(checkpoint, tmp_path):
    manifest = _manifest(tmp_path / "m.parquet", TEXTS[:1])
    code = f"""
import sys
class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("blocked")
sys.meta_path.insert(0, NoRay())
sys.argv = ["qtts", *{_args(checkpoint, manifest, tmp_path / "out")!r}, "--backend", "ray"]
from qtts.cli.app import main
main()
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'qtts[ray]'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("layout", ["webdataset", "parquet", "shar"])
def test_two_workers_write_archive_shards_every_id_once(cluster, markers, checkpoint, tmp_path,
                                                        hooks, layout):  # fmt: skip
    at = {"webdataset": 6, "parquet": 7, "shar": 8}[layout]  # an id of its own: a marker per id
    texts = [*TEXTS[:at], f"KILL this actor ({layout})", *TEXTS[at:]]  # its unit is retried
    manifest = _manifest(tmp_path / "m.parquet", texts)
    code, summary, out = _run(*_args(checkpoint, manifest, tmp_path / "out"), "--backend", "ray",
                              "--workers", 2, "--output", layout, "--shard-rows", 3)  # fmt: skip
    assert code == 0 and summary["ok"] == len(texts), out
    assert (markers / f"killed-u{at:02d}").exists()  # the actor did die on its first try
    data = tmp_path / "out" / "data"
    if layout == "webdataset":
        import webdataset as wds

        urls = sorted(str(p) for p in data.glob("*.tar"))
        ids = [json.loads(s["json"])["id"] for s in wds.WebDataset(urls, shardshuffle=False)]
    elif layout == "parquet":
        ids = [i for p in sorted(data.glob("*.parquet"))
               for i in pq.read_table(p, columns=["id"])["id"].to_pylist()]  # fmt: skip
    else:
        lhotse = pytest.importorskip("lhotse")
        ids = [cut.id for cut in lhotse.CutSet.from_shar(in_dir=data)]
    assert sorted(ids) == [f"u{i:02d}" for i in range(len(texts))]  # every id exactly once
    shards = list(data.glob("recording.*")) if layout == "shar" else list(data.iterdir())
    assert len(shards) >= 4  # units of at most 3 rows: a shard each
    results = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()
    assert all(r["member"] is not None and r["path"].startswith(str(data)) for r in results)
