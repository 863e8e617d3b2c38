"""The scale benchmark's finished out dirs are what a real run leaves: a rerun skips every row
of one, touching nothing, and its records match a real run's field for field (the audio aside)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import fakes
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from qtts.cli.app import app

REPO = Path(__file__).resolve().parents[3]
SAME = ("id", "row", "status", "error", "file", "text", "speaker", "language", "instruct",
        "seed", "ref_audio", "ref_text", "ref_digest", "settings", "model", "segments",
        "split")  # fmt: skip

pytestmark = pytest.mark.usefixtures("fake_model")


def _bench():
    spec = importlib.util.spec_from_file_location("scale_bench", REPO / "tools" / "scale_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(manifest, out, *extra):
    args = ["batch", str(manifest), "-o", str(out), "--model", "fake", "--speaker", "vivian",
            "--device", "cpu", *map(str, extra)]  # fmt: skip
    r = CliRunner().invoke(app, args)
    return r.exit_code, json.loads(r.stdout.strip().splitlines()[-1])


def _records(out, shard=""):
    rows = pq.read_table(out / ".qtts" / f"state{shard}.parquet").select(list(SAME)).to_pylist()
    return sorted(rows, key=lambda r: r["id"])


@pytest.mark.parametrize("shards", [1, 4])
def test_a_built_finished_job_is_a_finished_job(tmp_path, shards):
    bench = _bench()
    manifest = tmp_path / "m.parquet"
    bench.make_manifest(manifest, 40)
    code, real = _run(manifest, tmp_path / "real")
    assert code == 0 and real["ok"] == 40
    built = tmp_path / "built"
    n = bench.finish_job(manifest, built, "fake", shards, open_text_model=fakes.open_text_model)
    assert n == 40
    before = {
        p.name: p.stat().st_mtime_ns
        for p in built.rglob("*")
        if p.is_file() and p.suffix != ".lock"
    }
    flags = [] if shards == 1 else ["--num-shards", shards, "--shard-index", 0]

    def rerun_writes() -> dict[str, int]:
        code, rerun = _run(manifest, built, *flags)
        assert code == 0 and rerun["ok"] == 0 and rerun["skipped"] == rerun["total"] > 0
        return {p.name: p.stat().st_mtime_ns for p in built.rglob("*")
                if p.is_file() and p.suffix != ".lock"}  # fmt: skip

    after = rerun_writes()
    assert set(after) - set(before) == {"README.md"}  # the dataset card, where there was none
    assert {name: after[name] for name in before} == before  # nothing rewritten, nor results
    assert rerun_writes() == after  # and once the card is there, not even the card
    if shards == 1:
        assert _records(built) == _records(tmp_path / "real")


@pytest.mark.parametrize("layout", ["webdataset", "parquet"])
def test_a_built_archive_job_from_a_folder_of_parts_is_finished(tmp_path, layout):
    bench = _bench()
    manifest = tmp_path / "parts"
    bench.make_manifest(manifest, 45, parts=4)
    assert len(list(manifest.glob("*.parquet"))) == 4
    built = tmp_path / "built"
    n = bench.finish_job(
        manifest, built, "fake", 1, open_text_model=fakes.open_text_model, layout=layout
    )
    assert n == 45 and len(list((built / "data").iterdir())) == 1  # 45 rows, 1000 per shard
    code, rerun = _run(manifest, built, "--output", layout)
    assert code == 0 and rerun["ok"] == 0 and rerun["skipped"] == 45
    code, same = _run(manifest, built, "--output", layout, "--dry-run")
    assert code == 0 and same["skipped"] == 45 and same["redo"] == 0
    code, other = _run(manifest, built, "--output", "files", "--dry-run")
    assert code == 0 and other["to_repack"] == 45 and other["redo"] == 0  # moved, not redone
