"""tools/job_rows.py and tools/job_check.py's CPU pieces: the manifest of real sentences (its
lengths, speakers and determinism), the check that an out dir holds every id exactly once in each
layout, and the table (the runs themselves: tools/job_check.py on a tiny checkpoint)."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools"))

import job_rows  # noqa: E402

spec = importlib.util.spec_from_file_location("job_check", REPO / "tools" / "job_check.py")
job_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(job_check)


def test_rows_are_real_sentences_of_3_to_15_seconds():
    table = job_rows.make_rows(2048)
    texts = table["text"].to_pylist()
    assert table.num_rows == 2048 and len(set(table["id"].to_pylist())) == 2048
    assert all(job_rows.MIN_CHARS <= len(t) <= job_rows.MAX_CHARS for t in texts)
    assert set(table["speaker"].to_pylist()) == set(job_rows.SPEAKERS)
    pool = set(job_rows.sentences())
    assert len(pool) == 720  # the Harvard sentences, 72 lists of 10
    first = texts[0].split(". ")
    assert all(s.rstrip(".") + "." in pool or s in pool for s in first)
    d = job_rows.describe(table)
    assert 100 < d["chars_mean"] < 150  # about 8-9 s of speech a row
    assert d["chars_p10_p50_p90"][0] < 90 and d["chars_p10_p50_p90"][2] > 180  # a spread
    assert job_rows.make_rows(2048).equals(table)  # deterministic
    assert not job_rows.make_rows(2048, seed=1).equals(table)


def _results(out: Path, ids: list[str]) -> None:
    pq.write_table(pa.table({"id": ids, "status": ["ok"] * len(ids)}), out / "results.parquet")


def test_every_id_once_in_files(tmp_path):
    _results(tmp_path, ["a", "b"])
    for name in ("a.wav", "b.wav", "b.flac"):
        (tmp_path / name).write_bytes(b"")
    assert job_check.check_ids(tmp_path, "files", ["a", "b"]) is None
    assert "1 id(s) missing" in job_check.check_ids(tmp_path, "flac", ["a", "b"])
    assert "1 extra" in job_check.check_ids(tmp_path, "files", ["a"])


def test_every_id_once_in_shards(tmp_path):
    _results(tmp_path, ["a", "b"])
    (tmp_path / "data").mkdir()
    for k, ids in enumerate([["a"], ["b", "a"]]):
        with tarfile.open(tmp_path / "data" / f"w-{k:06d}.tar", "w") as tar:
            for i in ids:
                data = json.dumps({"id": i}).encode()
                info = tarfile.TarInfo(f"{i}.json")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    assert "1 extra or doubled" in job_check.check_ids(tmp_path, "webdataset", ["a", "b"])


def test_the_table_has_a_line_per_run():
    bench = {"run": "bench", "rows_ok": 4, "audio_s": 8.0, "synthesis_s": 2.0,
             "audio_s_per_s": 4.0, "load_s": 1.0, "process_s": 5.0}  # fmt: skip
    job = {**bench, "run": "files", "ratio": 0.95, "writer_wait_s": 0.0, "writer_drain_s": 0.1,
           "writer_busy_s": {"encode": 0.5, "write": 0.2}, "ids": job_check.ONCE}  # fmt: skip
    lines = job_check.table([bench, job]).splitlines()
    assert len(lines) == 3 and "job/bench" in lines[0]
    assert "0.950" in lines[2] and "encode 0.5 s; each once" in lines[2]


def test_a_warm_up_whose_rows_ran_to_their_budget_bounds_the_rest():
    assert not job_check.runaway({"rows_ok": 256, "hit_frame_budget": 3})
    assert job_check.runaway({"rows_ok": 256, "hit_frame_budget": 200})
    assert job_check.runaway({"rows_ok": None, "hit_frame_budget": None})  # it never finished


def test_the_checkpoint_stops_by_text_only_without_max_new_tokens(tmp_path, monkeypatch):
    """The maker stops rows by EOS by default: given --max-new-tokens (fixed lengths), job_check
    asks it for --no-eos-by-text, and records which it made."""
    from types import SimpleNamespace

    made = []

    def fake_run(cmd, **kw):
        if "--help" in cmd:
            return SimpleNamespace(stdout="[--eos-by-text | --no-eos-by-text]")
        made.append(cmd)
        Path(cmd[2]).mkdir(parents=True)
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(job_check.subprocess, "run", fake_run)
    for name, tokens in (("auto", None), ("fixed", 113)):
        a = SimpleNamespace(checkpoint=None, work_dir=tmp_path / name, preset="small",
                            size="0.6b", ckpt_dtype="bfloat16", max_new_tokens=tokens,
                            ckpt_timeout=60)  # fmt: skip
        _, eos, _ = job_check.make_checkpoint(a, tmp_path / f"{name}.log")
        assert eos is (tokens is None)
    assert made[0][-1] == "--eos-by-text" and made[1][-1] == "--no-eos-by-text"


def test_a_run_cut_by_its_limit_keeps_its_last_progress_line(tmp_path):
    """The line cli/progress.py logs, as a job wrote it to stderr before its limit stopped it."""
    from qtts.cli.progress import Progress

    log = tmp_path / "job.log"
    p = Progress(quiet=True)
    p.total, p.done, p.audio_s, p.planned_s = 2048, 109, 1234.0, 56622.0
    line = p.line()
    p.close()
    log.write_text(f"qtts INFO: {line.replace('elapsed 0:00:00', 'elapsed 0:00:30')}\n")
    assert job_check.last_progress(log) == {
        "rows": 109, "audio_s": 1234.0, "elapsed_s": 30, "audio_s_per_s": 41.133}  # fmt: skip
    assert job_check.last_progress(tmp_path / "none.log") is None
    row = job_check.job_row("files", {"exit_code": 124, "process_s": 55.0, "json": None}, None,
                            "no results.parquet", log)  # fmt: skip
    assert row["partial"]["rows"] == 109 and row["synthesis"] is None
