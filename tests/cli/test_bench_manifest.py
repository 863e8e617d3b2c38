"""`qtts bench --manifest`: a job's rows through a job's synthesis path, nothing written. On a tiny
checkpoint whose rows end by EOS at lengths set by their text (core/tiny/length_eos.py), CPU
fp32: the bench makes exactly the rows, frames and audio `qtts batch` makes of the same manifest
under the same options, and each row's budget is the one the job gives it (no timing is
asserted)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.jobs.work.budget import FrameBudget

TEXTS = ["A short one.", "The birch canoe slid on the smooth planks.", "Glue the sheet.", "", "Hi."]
OPTIONS = ["--device", "cpu", "--dtype", "float32", "--speaker", "vivian", "--split", "none"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", stop_by_text=True)


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "m.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(len(TEXTS))], "text": TEXTS}), path)
    return path


def test_the_bench_makes_what_the_job_makes(checkpoint, manifest, tmp_path):
    bench = CliRunner().invoke(
        app, ["bench", "--manifest", str(manifest), "--model", str(checkpoint), *OPTIONS]
    )
    assert bench.exit_code == 0, bench.output
    lines = bench.stdout.strip().splitlines()
    b = json.loads(lines[-1])["bench_manifest"]
    assert any("audio-s/s" in line for line in lines[:-1])
    job = CliRunner().invoke(
        app, ["batch", str(manifest), "-o", str(tmp_path / "out"), "--model", str(checkpoint),
              *OPTIONS],
    )  # fmt: skip
    assert job.exit_code == 3, job.output  # the empty text fails validation, in both
    s = json.loads(job.stdout.strip().splitlines()[-1])
    rows = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    assert (b["rows"], b["ok"], b["failed"]) == (len(TEXTS), s["ok"], s["failed"]) == (5, 4, 1)
    assert b["frames"] == sum(r["num_frames"] for r in ok)
    assert b["audio_s"] == pytest.approx(s["audio_s"])
    assert b["hit_frame_budget"] == s["hit_frame_budget"] == 0  # every row ended by EOS
    # The automatic budget of each row's text, as the job set it (its records keep the tokens).
    state = pq.read_table(tmp_path / "out" / ".qtts" / "state.parquet").to_pylist()
    tokens = np.array([r["text_tokens"] for r in state if r["status"] == "ok"])
    budget = FrameBudget(8192).max_new_tokens_of(tokens)
    assert b["budgets"] == [int(budget.min()), int(budget.max())]
    assert (b["on_budget"], b["split"], b["precision"]) == ("retry/3", "none", "cpu:float32")
    assert b["synthesis_s"] > 0 and b["audio_s_per_s"] > 0 and b["load_s"] > 0
    assert not list(tmp_path.glob("qtts-bench-*"))  # nothing written beside the job
    # Where the time went: host counts tied to what was made, the same in the job's summary.
    for clock in (b["synthesis"], s["synthesis"]):
        assert clock["frames"] == b["frames"] and clock["passes"] >= 1
        assert clock["decode_steps"] >= max(r["num_frames"] for r in ok)
        assert 0 < clock["slot_use"] <= 1
        assert clock["slot_steps"] >= clock["decode_steps"]
        assert clock["vocoder_windows"] >= 1 and clock["vocoder_rows"] >= len(ok)
        assert clock["vocoder_frames"] >= b["frames"] and clock["vocoder_s"] > 0
    assert any(line.startswith("      synthesis: 1 engine pass") for line in lines[:-1])


def test_a_manifest_needs_a_model(manifest):
    r = CliRunner().invoke(app, ["bench", "--manifest", str(manifest), "--device", "cpu"])
    assert r.exit_code == 2 and "--model" in r.output
