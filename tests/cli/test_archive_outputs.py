"""--output webdataset and --output parquet end to end: the files layout's audio row for row, read
back by the real clients (webdataset, Hugging Face datasets); every id exactly once after a kill
mid-shard, after a rerun that redoes rows of sealed shards, after a layout switch and with two
shard tasks writing into one OUT/data/. The tiny checkpoint's test proves plumbing on random
weights, not speech quality."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from fakes import fake_env, qtts_cmd

PCM_LSB = 1 / 32768  # 16-bit audio: the vocoder may batch rows differently per run


def _manifest(path, texts, ids=None):
    ids = ids or [f"r{i:02d}" for i in range(len(texts))]
    pq.write_table(pa.table({"id": ids, "text": texts}), path)
    return path


def tar_samples(out) -> list[dict]:
    """Every sample of OUT/data/*.tar as the webdataset library reads it, with no options."""
    import webdataset as wds

    urls = sorted(str(p) for p in (out / "data").glob("*.tar"))
    return list(wds.WebDataset(urls, shardshuffle=False)) if urls else []


def tar_ids(out) -> list[str]:
    return [json.loads(s["json"])["id"] for s in tar_samples(out)]


def parquet_ids(out) -> list[str]:
    parts = sorted((out / "data").glob("*.parquet"))
    return [i for p in parts for i in pq.read_table(p, columns=["id"])["id"].to_pylist()]


def _litter(out) -> list[str]:
    return [p.name for p in out.rglob("*") if ".qtts-tmp-" in p.name]


# -- the tiny checkpoint: the same audio as the files layout --------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny", seed=6)


def _tiny(checkpoint, manifest, out, *extra):
    cmd = [sys.executable, "-m", "qtts", "batch", str(manifest), "--model", str(checkpoint),
           "--device", "cpu", "--speaker", "vivian", "--max-new-tokens", "7", "--greedy",
           "--save-codes", "-o", str(out), "-q", *map(str, extra)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_archives_hold_the_files_layouts_audio_and_codes(checkpoint, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    ids = ["a1", "book1.ch2", "c%3", "d4", "e5"]
    manifest = _manifest(tmp_path / "m.parquet", [f"Row {i} speaks." for i in range(5)], ids)
    for layout in ("files", "webdataset", "parquet"):
        _tiny(checkpoint, manifest, tmp_path / layout, "--output", layout, "--shard-rows", 2)
    files = tmp_path / "files"
    want_audio = {i: sf.read(files / f"{i}.wav", dtype="float32")[0] for i in ids}
    want_codes = {i: np.load(files / f"{i}.codes.npy") for i in ids}

    samples = tar_samples(tmp_path / "webdataset")
    assert len(list((tmp_path / "webdataset" / "data").glob("*.tar"))) == 3  # 2 + 2 + 1 rows
    assert sorted(json.loads(s["json"])["id"] for s in samples) == sorted(ids)
    for s in samples:
        row_id = json.loads(s["json"])["id"]
        audio, rate = sf.read(io.BytesIO(s["wav"]), dtype="float32")
        assert rate == 24000
        np.testing.assert_allclose(audio, want_audio[row_id], rtol=0, atol=PCM_LSB)
        np.testing.assert_array_equal(np.load(io.BytesIO(s["codes.npy"])), want_codes[row_id])

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    ds = datasets.load_dataset(
        "parquet", data_dir=str(tmp_path / "parquet" / "data"), split="train",
        cache_dir=str(tmp_path / "hf"),
    )  # fmt: skip
    assert sorted(ds["id"]) == sorted(ids)
    for item in ds:
        assert item["audio"]["sampling_rate"] == 24000
        np.testing.assert_allclose(
            item["audio"]["array"], want_audio[item["id"]], rtol=0, atol=PCM_LSB
        )
        np.testing.assert_array_equal(np.load(io.BytesIO(item["codes"])), want_codes[item["id"]])

    results = pq.read_table(tmp_path / "webdataset" / "results.parquet").to_pylist()
    for r in results:
        assert r["path"].endswith(".tar") and r["member"].endswith(".wav")
    assert not (tmp_path / "webdataset" / "metadata.jsonl").exists()
    assert (tmp_path / "files" / "metadata.jsonl").exists()


# -- the fake model: the archive contract ---------------------------------------------------------


def _fake(manifest, out, *extra, **env):
    args = ("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o", out, "-q")
    return subprocess.run(
        qtts_cmd(*args, *extra), capture_output=True, text=True, env=fake_env(**env), timeout=120
    )


@pytest.mark.parametrize("layout", ["webdataset", "parquet"])
def test_kill_mid_shard_then_rerun_keeps_every_id_once(tmp_path, layout):
    texts = [f"Row {i} of a job that is killed." for i in range(12)]
    manifest = _manifest(tmp_path / "m.parquet", texts)
    out = tmp_path / "out"
    args = ("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o", out, "-q",
            "--output", layout, "--shard-rows", 3)  # fmt: skip
    proc = subprocess.Popen(
        qtts_cmd(*args), env=fake_env(QTTS_FAKE_DELAY="0.15"), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    sealed = []
    while time.monotonic() < deadline and not sealed:
        sealed = [p for p in (out / "data").glob("*-*") if not p.name.startswith(".")]
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert sealed, "no shard was sealed before the kill"
    assert _fake(manifest, out, "--output", layout, "--shard-rows", 3).returncode == 0
    ids = tar_ids(out) if layout == "webdataset" else parquet_ids(out)
    assert Counter(ids) == Counter(f"r{i:02d}" for i in range(12))
    assert _litter(out) == []
    results = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["status"] for r in results] == ["ok"] * 12


KILL_POINTS = Path(__file__).resolve().parents[1] / "kill_points.py"
SHARD_WRITERS = {"webdataset": "webdataset:TarShardWriter", "parquet": "parquet:ParquetShardWriter"}


@pytest.mark.parametrize("layout", ["webdataset", "parquet"])
def test_a_kill_while_a_shard_is_open_leaves_temps_the_rerun_removes(tmp_path, layout):
    """Killed (os._exit, nothing cleaned) just after the 5th row went into its shard: the first
    shard (rows 1-3) sealed, the second's temp holding rows 4-5, which have no record. The rerun
    removes that temp and redoes its rows; every id is in a sealed shard once."""
    manifest = _manifest(tmp_path / "m.parquet", [f"Row {i} of a killed job." for i in range(8)])
    out = tmp_path / "out"
    args = ("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o", out, "-q",
            "--output", layout, "--shard-rows", 3)  # fmt: skip
    writer = f"qtts.core.jobs.output.stores.formats.{SHARD_WRITERS[layout]}.add"
    cmd = [sys.executable, str(KILL_POINTS), writer, "5", "after", "--", *map(str, args)]
    killed = subprocess.run(cmd, env=fake_env(), capture_output=True, text=True, timeout=120)
    assert killed.returncode == 9, killed.stderr
    assert _litter(out), "no temp shard was left by the kill"
    sealed = tar_ids(out) if layout == "webdataset" else parquet_ids(out)
    assert len(set(sealed)) == len(sealed) == 3  # which rows: the run's order (longest first)

    rerun = _fake(manifest, out, "--output", layout, "--shard-rows", 3)
    assert rerun.returncode == 0, rerun.stderr
    assert (json.loads(rerun.stdout)["ok"], json.loads(rerun.stdout)["skipped"]) == (5, 3)
    assert _litter(out) == []
    ids = tar_ids(out) if layout == "webdataset" else parquet_ids(out)
    assert Counter(ids) == Counter(f"r{i:02d}" for i in range(8))
    results = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["status"] for r in results] == ["ok"] * 8


@pytest.mark.parametrize("layout", ["webdataset", "parquet"])
def test_a_rerun_redoing_rows_of_sealed_shards_keeps_every_id_once(tmp_path, layout):
    texts = [f"Row {i} as first written." for i in range(6)]
    out = tmp_path / "out"
    manifest = _manifest(tmp_path / "m.parquet", texts)
    assert _fake(manifest, out, "--output", layout, "--shard-rows", 3).returncode == 0
    texts[1], texts[4] = "Row 1, rewritten.", "Row 4, rewritten at more length."
    _manifest(tmp_path / "m.parquet", texts)
    rerun = _fake(manifest, out, "--output", layout, "--shard-rows", 3)
    assert rerun.returncode == 0 and "text (2)" in rerun.stderr, rerun.stderr
    if layout == "webdataset":
        texts_now = {json.loads(s["json"])["id"]: json.loads(s["json"])["text"]
                     for s in tar_samples(out)}  # fmt: skip
        ids = tar_ids(out)
    else:
        parts = sorted((out / "data").glob("*.parquet"))
        table = pa.concat_tables([pq.read_table(p, columns=["id", "text"]) for p in parts])
        texts_now = dict(zip(table["id"].to_pylist(), table["text"].to_pylist(), strict=True))
        ids = table["id"].to_pylist()
    assert Counter(ids) == Counter(f"r{i:02d}" for i in range(6))
    assert texts_now == {f"r{i:02d}": t for i, t in enumerate(texts)}
    assert len(list((out / "data").iterdir())) == 3  # two rewritten shards and the new one
    again = _fake(manifest, out, "--output", layout, "--shard-rows", 3)
    assert json.loads(again.stdout.splitlines()[-1])["skipped"] == 6


def test_switching_layouts_moves_every_row_and_overwrite_keeps_one_copy(tmp_path):
    manifest = _manifest(tmp_path / "m.parquet", [f"Row {i}." for i in range(4)])
    out = tmp_path / "out"
    assert _fake(manifest, out).returncode == 0
    assert len(list(out.glob("*.wav"))) == 4 and (out / "metadata.jsonl").exists()
    switched = _fake(manifest, out, "--output", "webdataset")
    assert switched.returncode == 0 and json.loads(switched.stdout)["repacked"] == 4
    assert list(out.glob("*.wav")) == [] and not (out / "metadata.jsonl").exists()
    assert sorted(tar_ids(out)) == [f"r{i:02d}" for i in range(4)]
    assert _fake(manifest, out, "--output", "webdataset", "--overwrite").returncode == 0
    assert sorted(tar_ids(out)) == [f"r{i:02d}" for i in range(4)]
    assert len(list((out / "data").glob("*.tar"))) == 1
    kept = _fake(manifest, out)  # no --output: the out dir's own layout, nothing moved
    assert kept.returncode == 0 and json.loads(kept.stdout)["repacked"] == 0
    assert len(list((out / "data").glob("*.tar"))) == 1
    back = _fake(manifest, out, "--output", "files")
    assert back.returncode == 0 and list((out / "data").glob("*.tar")) == []
    assert len(list(out.glob("*.wav"))) == 4


def test_two_shard_tasks_share_one_data_folder(tmp_path):
    manifest = _manifest(tmp_path / "m.parquet", [f"Row {i} of two tasks." for i in range(10)])
    out = tmp_path / "out"
    tasks = [
        subprocess.Popen(
            qtts_cmd(
                "batch",
                manifest,
                "--model",
                "fake-0.6b",
                "--speaker",
                "vivian",
                "-o",
                out,
                "-q",
                "--output",
                "webdataset",
                "--shard-rows",
                2,
                "--num-shards",
                2,
                "--shard-index",
                k,
            ),
            env=fake_env(QTTS_FAKE_DELAY="0.02"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for k in range(2)
    ]
    for task in tasks:
        assert task.wait(timeout=120) == 0, task.stderr.read()
    names = sorted(p.name for p in (out / "data").glob("*.tar"))
    assert {n.split("-of-")[0] for n in names} == {"shard-0", "shard-1"}
    assert Counter(tar_ids(out)) == Counter(f"r{i:02d}" for i in range(10))
    results = subprocess.run(qtts_cmd("results", out), capture_output=True, text=True,
                             env=fake_env())  # fmt: skip
    assert json.loads(results.stdout.splitlines()[-1])["complete"] is True


def test_a_row_failing_on_a_rerun_leaves_its_shard(tmp_path):
    texts = [f"Row {i} to keep." for i in range(4)]
    out = tmp_path / "out"
    manifest = _manifest(tmp_path / "m.parquet", texts)
    assert _fake(manifest, out, "--output", "webdataset", "--shard-rows", 2).returncode == 0
    _manifest(tmp_path / "m.parquet", [texts[0], "   ", *texts[2:]])  # r01 now fails validation
    assert _fake(manifest, out, "--output", "webdataset", "--shard-rows", 2).returncode == 3
    assert sorted(tar_ids(out)) == ["r00", "r02", "r03"]  # a failed row has no audio anywhere
    _manifest(tmp_path / "m.parquet", texts)  # fixed again: made once more, exactly once
    assert _fake(manifest, out, "--output", "webdataset", "--shard-rows", 2).returncode == 0
    assert Counter(tar_ids(out)) == Counter(f"r{i:02d}" for i in range(4))


@pytest.mark.parametrize("layout", ["files", "webdataset"])
def test_a_row_done_before_and_failing_now_leaves_no_audio_behind(tmp_path, layout):
    """Redone and failing in synthesis (r01), or failing validation now (r02): neither keeps the
    audio of its earlier run, which a loader handed the folder would take as the row's (an
    AudioFolder without metadata.jsonl lists every file)."""
    texts = [f"Row {i} to keep." for i in range(4)]
    out, path = tmp_path / "out", tmp_path / "m.parquet"
    manifest = _manifest(path, texts)
    made = ("--output", layout, "--shard-rows", 2, "--save-codes")
    assert _fake(manifest, out, *made).returncode == 0
    _manifest(path, [texts[0], "Row 1 [fail].", "   ", texts[3]])
    dry = json.loads(_fake(manifest, out, *made, "--dry-run").stdout.splitlines()[-1])
    assert dry["taken_out"] == (1 if layout == "files" else 2)  # a redone file: replaced by name
    assert _fake(manifest, out, *made).returncode == 3
    if layout == "files":  # the audio and the codes files
        assert sorted(p.name.split(".")[0] for p in out.glob("r0*.*")) == [
            "r00",
            "r00",
            "r03",
            "r03",
        ]
    else:  # the members, codes beside the audio
        assert sorted(tar_ids(out)) == ["r00", "r03"]
    results = {r["id"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}
    assert [results[i]["status"] for i in ("r01", "r02")] == ["failed", "failed"]


def _dry(manifest, out, *extra) -> dict:
    proc = _fake(manifest, out, "--output", "webdataset", "--shard-rows", 3, "--dry-run", *extra)
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == summary["exit_code"] == 0, proc.stderr  # failing rows: counted
    return summary


def _shards(out) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "data").glob("*.tar"))}


def test_a_dry_run_counts_the_rows_and_shards_a_run_would_take_out(tmp_path):
    from qtts.core.jobs.execution.dry_run import DryRunSummary

    texts = [f"Row {i} as first written." for i in range(6)]
    out = tmp_path / "out"
    manifest = _manifest(tmp_path / "m.parquet", texts)
    assert _fake(manifest, out, "--output", "webdataset", "--shard-rows", 3).returncode == 0
    before = _shards(out)
    assert len(before) == 2
    unchanged = _dry(manifest, out)
    assert (unchanged["taken_out"], unchanged["outputs_rewritten"]) == (0, 0)
    overwrite = _dry(manifest, out, "--overwrite")
    assert (overwrite["taken_out"], overwrite["outputs_rewritten"]) == (6, 2)
    # r01 redone (new text), r02 failing now (an emptied text): both in the first shard
    _manifest(tmp_path / "m.parquet", [texts[0], "Row 1, rewritten.", "  ", *texts[3:]])
    dry = _dry(manifest, out)
    assert (dry["redo"], dry["failed"]) == (1, 1)
    assert (dry["taken_out"], dry["outputs_rewritten"]) == (2, 1)
    summary = DryRunSummary(**{k: v for k, v in dry.items() if k != "est_audio_hours"})
    assert "1 to redo (text (1)), 2 taken out of 1 output file(s) first" in summary.describe()
    assert _shards(out) == before  # the dry run wrote nothing
    assert _fake(manifest, out, "--output", "webdataset", "--shard-rows", 3).returncode == 3
    after = _shards(out)
    rewritten = [name for name in before if after.get(name) != before[name]]
    assert len(rewritten) == dry["outputs_rewritten"]
    assert Counter(tar_ids(out)) == Counter(f"r{i:02d}" for i in range(6) if i != 2)


def test_a_dry_run_of_a_layout_switch_counts_the_files_it_would_remove(tmp_path):
    texts = [f"Row {i}." for i in range(4)]
    manifest = _manifest(tmp_path / "m.parquet", texts)
    out = tmp_path / "out"
    assert _fake(manifest, out).returncode == 0
    same = json.loads(_fake(manifest, out, "--dry-run").stdout.splitlines()[-1])
    assert (same["taken_out"], same["outputs_rewritten"]) == (0, 0)
    _manifest(tmp_path / "m.parquet", ["Row 0, rewritten.", "Row 1, too.", *texts[2:]])
    switch = _dry(manifest, out)  # two rows redone (taken out first), two repacked
    assert (switch["redo"], switch["taken_out"], switch["outputs_rewritten"]) == (2, 2, 2)
    assert (switch["to_repack"], switch["to_synthesize"]) == (2, 2)
    assert len(list(out.glob("*.wav"))) == 4  # still there: a dry run writes nothing
