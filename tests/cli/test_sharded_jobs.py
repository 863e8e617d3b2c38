"""Sharded jobs end to end on a tiny checkpoint, sampling on, a seed per row: shards run one after
another, or all at once into one out dir, give the files and codes of one unsharded run, and
results.parquet covers every row once the last shard is done (`qtts results` says complete)."""

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf

ROWS = 14
PCM_LSB = 1 / 32768  # 16-bit WAV: the vocoder may batch rows differently per run


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny", seed=6)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    import pyarrow as pa

    path = tmp_path_factory.mktemp("m") / "m.parquet"
    rows = [{"id": f"utt{i:02d}", "text": f"Row {i} says something.", "seed": 100 + i}
            for i in range(ROWS)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _cmd(checkpoint, manifest, out, *extra):
    return [sys.executable, "-m", "qtts", "batch", str(manifest), "--model", str(checkpoint),
            "--device", "cpu", "--speaker", "vivian", "--max-new-tokens", "7", "--save-codes",
            "-o", str(out), "-q", *map(str, extra)]  # fmt: skip


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QTTS_", "SLURM_"))}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _outputs(out):
    codes = {p.name: np.load(p) for p in out.glob("*.codes.npy")}
    audio = {p.name: sf.read(p, dtype="float32")[0] for p in out.glob("*.wav")}
    return codes, audio


@pytest.fixture(scope="module")
def unsharded(checkpoint, manifest, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "out"
    proc = subprocess.run(_cmd(checkpoint, manifest, out), env=_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return _outputs(out)


def _same_as_unsharded(out, unsharded):
    codes, audio = _outputs(out)
    want_codes, want_audio = unsharded
    assert sorted(codes) == sorted(want_codes) and len(codes) == ROWS
    for name, c in want_codes.items():
        np.testing.assert_array_equal(codes[name], c, err_msg=name)
    for name, a in want_audio.items():
        assert audio[name].shape == a.shape
        np.testing.assert_allclose(audio[name], a, rtol=0, atol=PCM_LSB, err_msg=name)
    results = pq.read_table(out / "results.parquet").to_pylist()
    assert sorted(r["id"] for r in results) == sorted(f"utt{i:02d}" for i in range(ROWS))
    assert {r["status"] for r in results} == {"ok"}
    assert not list(out.glob(".*qtts-tmp-*"))


def _results(out):
    proc = subprocess.run([sys.executable, "-m", "qtts", "results", str(out)], env=_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_shards_one_after_another_equal_one_run(checkpoint, manifest, tmp_path, unsharded):
    out = tmp_path / "out"
    done = 0
    for i in range(3):
        proc = subprocess.run(
            _cmd(checkpoint, manifest, out, "--num-shards", 3, "--shard-index", i),
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        done += summary["ok"]
        code, merged = _results(out)
        assert code == 0 and merged["ok"] == done and merged["complete"] == (i == 2)
    assert done == ROWS
    assert sorted(p.name for p in (out / ".qtts").glob("state*")) == [
        f"state-shard-{i}-of-3.parquet" for i in range(3)
    ]
    assert not list((out / ".qtts").glob("journal*"))  # folded into each shard's state
    _same_as_unsharded(out, unsharded)
    # A shard rerun alone resumes: its rows are all done.
    proc = subprocess.run(_cmd(checkpoint, manifest, out, "--num-shards", 3, "--shard-index", 1),
                          env=_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and summary["ok"] == 0 and summary["skipped"] == summary["total"]


def test_shards_at_the_same_time_into_one_out_dir(checkpoint, manifest, tmp_path, unsharded):
    """A Slurm array of 3 (task ids 1..3): the shard comes from the environment."""
    out = tmp_path / "out"
    procs = [
        subprocess.Popen(
            _cmd(checkpoint, manifest, out),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(
                SLURM_ARRAY_TASK_COUNT="3", SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_MIN="1"
            ),
        )  # fmt: skip
        for task in (1, 2, 3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, stderr) in zip(procs, outs, strict=True):
        assert p.returncode == 0, stderr
    assert sum(json.loads(o.strip().splitlines()[-1])["ok"] for o, _ in outs) == ROWS
    _same_as_unsharded(out, unsharded)
    code, merged = _results(out)
    assert code == 0 and merged["complete"] and merged["total"] == ROWS
