"""A seeded request gives the same codes alone, in a batch of 16 others, and after kill -9 + resume.

CPU fp32, sampling on (the checkpoint's generation_config defaults). The draw is keyed by (seed,
frame, codebook, vocab index) and every slot is prefilled alone, so nothing depends on the company a
request keeps.
"""

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

from qtts.core.synthesis.requests import GenerationOptions, Request

TEXTS = [f"The quick brown fox jumps over the lazy dog, take {i}." for i in range(16)]
TARGET = Request("target", "Hello there, this is the target row.", 99, "ryan", "auto", None,
                 seed=1234, max_new_tokens=24)  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", seed=3)


def _others() -> list[Request]:
    return [Request(f"o{i}", t, i + 1, "vivian", "english", None, seed=100 + i,
                    max_new_tokens=20 + i) for i, t in enumerate(TEXTS)]  # fmt: skip


def _codes(checkpoint, requests, batch_size, generator="engine") -> dict[str, np.ndarray]:
    from qtts.core.synthesis.requests import Placement
    from qtts.core.synthesis.session import load_synthesizer, open_text_model

    text_model = open_text_model(str(checkpoint))
    synth = load_synthesizer(
        text_model, Placement(device="cpu", dtype="float32", batch_size=batch_size)
    )
    synth.generator = generator
    d = text_model.defaults
    assert d.talker.do_sample and d.subtalker.do_sample  # sampling on
    return {
        u.id: u.codes for u in synth.synthesize(requests, GenerationOptions(d.talker, d.subtalker))
    }


@pytest.fixture(scope="module")
def alone(checkpoint) -> np.ndarray:
    return _codes(checkpoint, [TARGET], batch_size=1)["target"]


@pytest.mark.parametrize("threads", ["serial", "overlap"])
def test_alone_equals_inside_a_batch_of_16(checkpoint, alone, threads, monkeypatch):
    """Whether the vocoder runs after each group (a CPU's default) or on its own thread beside
    decoding (the GPU's arrangement, QTTS_CPU_THREADS=overlap), rows come back whole and the
    same."""
    monkeypatch.setenv("QTTS_CPU_THREADS", threads)
    others = _others()
    got = _codes(checkpoint, others[:7] + [TARGET] + others[7:], batch_size=16)
    assert alone.shape[0] > 2
    np.testing.assert_array_equal(got["target"], alone)
    assert got.keys() == {r.id for r in [*others, TARGET]}
    # The naive generator (one padded static batch) agrees with the engine too.
    ref = _codes(checkpoint, [TARGET, *others[:3]], batch_size=4, generator="naive")
    np.testing.assert_array_equal(ref["target"], alone)


def test_seed_matters(checkpoint, alone):
    other_seed = Request(**{**TARGET.__dict__, "seed": 4321})
    assert not np.array_equal(_codes(checkpoint, [other_seed], 1)["target"], alone)


@pytest.mark.slow
def test_same_codes_after_kill_and_resume(checkpoint, alone, tmp_path):
    rows = [(f"o{i}", t, "vivian", "english", 100 + i) for i, t in enumerate(TEXTS)]
    rows.insert(9, ("target", TARGET.text, "ryan", "auto", TARGET.seed))
    table = pa.table({k: [r[i] for r in rows] for i, k in
                      enumerate(["id", "text", "speaker", "language", "seed"])})  # fmt: skip
    pq.write_table(table, tmp_path / "m.parquet")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "qtts", "batch", str(tmp_path / "m.parquet"), "--model",
           str(checkpoint), "--device", "cpu", "--dtype", "float32", "--batch-size", "4",
           "--max-new-tokens", "24", "--save-codes", "--out-dir", str(out), "-q"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        # Finished files, not journal lines: a row is journalled just before its file is renamed
        # into place, so a kill between the two leaves the journal one row ahead of the files.
        if len(list(out.glob("*.wav"))) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the job finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {p.name for p in out.glob("*.wav")}
    assert 3 <= len(done_before) < len(rows)
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["ok"] + summary["skipped"] == len(rows)
    np.testing.assert_array_equal(np.load(out / "target.codes.npy"), alone)
