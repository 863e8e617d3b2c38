"""`qtts batch` says where its time went: the model's load, synthesis, and its writers (threads,
busy seconds by part, the synthesis loop's waits on them), in the summary's JSON and a log line;
a job whose writers held synthesis up says so in one line with a hint. Tiny checkpoint, CPU
fp32; a deliberately slow encoder (monkeypatched) stands in for writers that cannot keep up."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.jobs.output.stores.open_store import writer_threads
from qtts.core.jobs.output.writer import PARTS

ROWS = 6
SLOW_ENCODE_S = 0.4
ROUNDING_S = 2e-3  # the summary's seconds are rounded to 3 decimals; a sum of two, a little more


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", seed=1)


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "m.parquet"
    texts = [f"Sentence number {i} is read aloud." for i in range(ROWS)]
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(ROWS)], "text": texts}), path)
    return path


def batch(checkpoint, manifest, out, *extra: str) -> tuple[dict, str]:
    """(the summary, stderr's log lines)"""
    r = CliRunner().invoke(app, ["batch", str(manifest), "-o", str(out), "--model",
                                 str(checkpoint), "--device", "cpu", "--dtype", "float32",
                                 "--speaker", "vivian", "--max-new-tokens", "4",
                                 "--on-budget", "ok", *extra])  # fmt: skip
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@pytest.mark.parametrize("layout", ["files", "webdataset"])
def test_the_summary_says_where_the_time_went(checkpoint, manifest, tmp_path, layout):
    s, log = batch(checkpoint, manifest, tmp_path / "out", "--output", layout)
    assert s["ok"] == ROWS
    assert 0 < s["load_s"] and 0 < s["synthesis_s"]
    assert s["load_s"] + s["synthesis_s"] <= s["wall_s"]
    assert s["synthesis_audio_s_per_s"] == pytest.approx(
        s["audio_s"] / s["synthesis_s"],
        rel=1e-2 + 1e-3 / s["synthesis_s"],  # synthesis_s: 3 d.p.
    )
    w = s["writing"]
    assert w["threads"] == writer_threads()
    assert set(w["busy_s"]) == set(PARTS) and all(v >= 0 for v in w["busy_s"].values())
    # each row was encoded; each row (files) or each shard (archives) was journalled
    assert w["busy_s"]["encode"] > 0 and w["busy_s"]["journal"] > 0
    assert 0 <= w["wait_s"] <= s["synthesis_s"] and 0 <= w["drain_s"] <= s["synthesis_s"]
    assert w["hint"] is None  # these writers kept up
    assert "qtts INFO: writing: " in log
    # The run's time split adds up to the command's time, each part in its place: the load is
    # the summary's, the decode steps ran between the synthesis start and the drain.
    t = s["time_split"]
    parts = [k for k in t if k != "command_s"]
    assert parts == ["input_s", "scan_s", "load_s", "one_time_s", "decoding_s", "drain_s",
                     "finish_s"]  # fmt: skip
    assert all(t[k] >= 0 for k in parts), t
    assert sum(t[k] for k in parts) == pytest.approx(t["command_s"], abs=len(parts) * 1e-3)
    assert t["load_s"] == pytest.approx(s["load_s"], abs=ROUNDING_S)
    assert t["command_s"] >= s["wall_s"] - ROUNDING_S
    assert t["one_time_s"] == pytest.approx(s["synthesis"]["pass_build_s"], abs=ROUNDING_S)
    spans = t["one_time_s"] + t["decoding_s"] + t["drain_s"]  # from the load's end: holds it
    assert spans >= s["synthesis_s"] - 3 * ROUNDING_S


def test_a_slow_writer_shows_as_a_wait_with_a_hint(checkpoint, manifest, tmp_path, monkeypatch):
    from qtts.core.jobs.execution import local_backend
    from qtts.core.jobs.output import writer as files  # the files layout encodes through it

    encode = files.encode_audio

    def slow(*args, **kwargs):
        time.sleep(SLOW_ENCODE_S)
        return encode(*args, **kwargs)

    monkeypatch.setattr(files, "encode_audio", slow)
    monkeypatch.setattr(local_backend, "MAX_WRITES_IN_FLIGHT", 0)  # each row waits for the last
    s, log = batch(checkpoint, manifest, tmp_path / "out")
    w = s["writing"]
    assert w["busy_s"]["encode"] >= ROWS * SLOW_ENCODE_S
    # With one row in flight, the loop waits for the older rows while the newest encodes.
    assert w["wait_s"] >= SLOW_ENCODE_S
    assert w["wait_s"] + w["drain_s"] <= s["synthesis_s"] + ROUNDING_S
    assert w["hint"] is not None and "encoding" in w["hint"]
    assert w["hint"].startswith("synthesis waited ")  # its seconds: unrounded, to 0.1 s
    closing = [line for line in log.splitlines() if " done: " in line]
    assert closing and w["hint"] in closing[-1]
