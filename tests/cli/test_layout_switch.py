"""A layout or format switch on an out dir of finished rows: the audio is repacked (tar members,
Parquet rows, files; wav -> flac transcoded), never made again, and the model is never loaded
(QTTS_FAKE_LOAD_FAIL makes any load fail the run). A kill -9 at each step of a repack, and
during a switch that does synthesize, leaves an out dir the next run opens: exit 0 and every id
exactly once. Fake model; the kills in a subprocess (tests/kill_points.py), the rest in process."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import time
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from fakes import fake_env, qtts_cmd
from layout_switch import (
    IDS,
    POINTS,
    ROWS,
    STORES,
    assert_same_rows,
    audio_and_codes,
    copies,
    count_take_outs,
    kill_at,
    litter,
    made_at,
    make_sources,
    metadata_lists_what_is_there,
    qtts,
    recorded_where_it_is,
    shard_sizes,
    summary,
)
from typer.testing import CliRunner

from qtts.cli.app import app

pytestmark = pytest.mark.usefixtures("fake_model")


@pytest.fixture
def manifest(write_manifest):
    return write_manifest([{"id": i, "text": f"Row {i} of a finished job."} for i in IDS])


@pytest.fixture
def finished(manifest, tmp_path):
    """An out dir of ROWS finished WAVs with codes, and what they hold."""
    out = tmp_path / "out"
    assert qtts(manifest, out).exit_code == 0
    return out, audio_and_codes(out)


@pytest.mark.parametrize(
    "steps",
    [
        (("--output", "webdataset"), ("--output", "parquet"), ("--output", "files")),
        (
            ("--output", "parquet", "--format", "flac"),
            ("--output", "webdataset"),
            ("--output", "files", "--format", "wav"),
        ),
    ],
)
def test_a_layout_switch_repacks_without_the_model(finished, manifest, steps):
    out, before = finished
    for step in steps:
        r = qtts(manifest, out, *step, "--shard-rows", 4, QTTS_FAKE_LOAD_FAIL="1")
        assert r.exit_code == 0, r.stderr
        s = summary(r)
        assert (s["repacked"], s["ok"], s["skipped"], s["load_s"]) == (ROWS, 0, 0, None)
        assert f"repacked {ROWS} row(s)" in r.stderr
        assert_same_rows(out, before)
    assert sorted(p.name for p in out.glob("*.wav")) == [f"{i}.wav" for i in IDS]
    assert list((out / "data").iterdir()) == [] and (out / "metadata.jsonl").exists()
    again = qtts(manifest, out, QTTS_FAKE_LOAD_FAIL="1")
    assert summary(again)["skipped"] == ROWS


def test_a_run_that_leaves_the_flags_out_keeps_the_out_dirs_layout_and_format(finished, manifest):
    """--output and --format left out mean the out dir's own (its job file records them): a
    cron line missing a flag resumes the dataset as it is, and never repacks it into the
    defaults. Another value given repacks; a new out dir starts with files and wav."""
    out, before = finished
    assert json.loads((out / ".qtts" / "job.json").read_text())["layout"] == "files"
    switched = qtts(manifest, out, "--output", "webdataset", "--format", "flac", "--shard-rows", 4)
    assert summary(switched)["repacked"] == ROWS
    for run in (qtts(manifest, out, QTTS_FAKE_LOAD_FAIL="1"),
                qtts(manifest, out, "--dry-run", QTTS_FAKE_LOAD_FAIL="1")):  # fmt: skip
        assert run.exit_code == 0, run.stderr
        got = summary(run)
        assert got.get("repacked", got.get("to_repack")) == 0 and got["skipped"] == ROWS
        assert "--output webdataset, --format flac: as" in run.stderr
    job = json.loads((out / ".qtts" / "job.json").read_text())
    assert (job["layout"], job["audio_format"]) == ("webdataset", "flac")
    assert list(out.glob("*.wav")) == [] and len(list((out / "data").glob("*.tar"))) == 3
    assert_same_rows(out, before)


def test_an_out_dir_from_before_the_recorded_layout_keeps_its_own(finished, manifest):
    """A job file written before it recorded layout and format: a run without the flags reads
    them once from the records (the rows' locations, the settings they were made with), moves
    nothing, and records them from then on."""
    out, before = finished
    switched = qtts(manifest, out, "--output", "parquet", "--format", "flac", "--shard-rows", 4)
    assert summary(switched)["repacked"] == ROWS
    job_file = out / ".qtts" / "job.json"
    old = {k: v for k, v in json.loads(job_file.read_text()).items()
           if k not in ("layout", "audio_format")}  # fmt: skip
    job_file.write_text(json.dumps(old))
    r = qtts(manifest, out, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0, r.stderr
    assert (summary(r)["repacked"], summary(r)["skipped"]) == (0, ROWS)
    assert "--output parquet, --format flac: as" in r.stderr
    job = json.loads(job_file.read_text())
    assert (job["layout"], job["audio_format"]) == ("parquet", "flac")
    assert_same_rows(out, before)


@pytest.mark.parametrize("switch", [("--output", "webdataset"), ("--format", "flac")])
def test_a_switch_without_save_codes_moves_the_audio_and_drops_the_codes(finished, manifest,
                                                                         switch):  # fmt: skip
    out, before = finished
    args = ["batch", manifest, "-o", out, "--model", "fake-0.6b", "--speaker", "vivian", *switch]
    r = CliRunner().invoke(app, [str(a) for a in args], env={"QTTS_FAKE_LOAD_FAIL": "1"})
    assert r.exit_code == 0 and summary(r)["repacked"] == ROWS, r.stderr
    assert copies(out) == Counter(IDS) and list(out.glob("*.codes.npy")) == []
    for shard in (out / "data").glob("*.tar"):
        with tarfile.open(shard) as tar:
            assert not [m.name for m in tar if m.name.endswith(".codes.npy")]
    from qtts.core.jobs.state.shard_state import read_all

    assert set(read_all(out, ("codes_saved",))["codes_saved"].to_pylist()) == {False}
    got = {p.name.split(".")[0]: sf.read(p, dtype="int16")[0] for p in out.glob("*.flac")}
    for row_id, audio in got.items():  # the flac switch: the same samples
        np.testing.assert_array_equal(audio, before[row_id][0])
    again = CliRunner().invoke(app, [str(a) for a in args], env={"QTTS_FAKE_LOAD_FAIL": "1"})
    assert summary(again)["skipped"] == ROWS


def test_a_sharded_job_switches_a_shard_at_a_time(manifest, tmp_path):
    """Each job shard repacks its own rows under its own intents: a kill in shard 0's switch
    leaves them to shard 0's next run, and shard 1's switch meanwhile touches none of them."""
    out = tmp_path / "out"
    for k in (0, 1):
        assert qtts(manifest, out, "--num-shards", 2, "--shard-index", k).exit_code == 0
    before = audio_and_codes(out)
    switch = ("--output", "webdataset", "--shard-rows", 2, "--num-shards", 2)
    kill_at("journalled", manifest, out, *switch, "--shard-index", 0)
    left = sorted(p.name for p in (out / ".qtts").glob("repack*.parquet"))
    assert left and all(name.startswith("repack-shard-0-of-2.") for name in left)
    r = qtts(manifest, out, *switch, "--shard-index", 1, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0 and summary(r)["ok"] == 0 < summary(r)["repacked"], r.stderr
    assert sorted(p.name for p in (out / ".qtts").glob("repack*.parquet")) == left
    r = qtts(manifest, out, *switch, "--shard-index", 0, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0 and summary(r)["ok"] == 0, r.stderr
    assert_same_rows(out, before)
    assert list(out.glob("*.wav")) == []


def test_a_format_switch_transcodes(finished, manifest):
    out, before = finished
    stamps = made_at(out)
    r = qtts(manifest, out, "--format", "flac", QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0 and summary(r)["repacked"] == ROWS, r.stderr
    assert list(out.glob("*.wav")) == [] and len(list(out.glob("*.flac"))) == ROWS
    assert all(p.read_bytes()[:4] == b"fLaC" for p in out.glob("*.flac"))
    assert_same_rows(out, before)
    meta = [json.loads(line) for line in (out / "metadata.jsonl").read_text().splitlines()]
    assert sorted(m["file_name"] for m in meta) == [f"{i}.flac" for i in IDS]
    assert made_at(out) == stamps  # the audio was made when it was: its scores still hold


def test_a_dry_run_counts_rows_to_repack_and_to_synthesize(finished, manifest, write_manifest):
    out, _ = finished
    rows = [{"id": i, "text": f"Row {i} of a finished job."} for i in IDS]
    rows[3]["text"] = "Row 3, rewritten."  # made again; the other nine are repacked
    write_manifest(rows)
    dry = qtts(manifest, out, "--output", "webdataset", "--dry-run")
    s = summary(dry)
    assert (s["to_repack"], s["to_synthesize"], s["redo"], s["skipped"]) == (9, 1, 1, 0)
    assert "9 to repack (no synthesis)" in dry.stderr
    assert copies(out) == Counter(IDS) and not (out / "data").exists()  # nothing written
    r = qtts(manifest, out, "--output", "webdataset")
    assert (summary(r)["repacked"], summary(r)["ok"]) == (9, 1) and copies(out) == Counter(IDS)


# -- a kill -9 at each step of a repack, then a rerun -------------------------------------------


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return make_sources(tmp_path_factory.mktemp("sources"))


SWITCHES = {
    "files->webdataset": ("files", ("--output", "webdataset")),
    "files->parquet": ("files", ("--output", "parquet")),
    "webdataset->files": ("webdataset", ("--output", "files")),
    "webdataset->parquet": ("webdataset", ("--output", "parquet")),
    "wav->flac": ("files", ("--format", "flac")),
    # source shards of one size into batches of another: each source shard taken out once
    "webdataset(3)->parquet(4)": ("webdataset", ("--output", "parquet", "--shard-rows", 4)),
    "parquet(4)->webdataset(3)": ("parquet", ("--output", "webdataset")),
}
CASES = [
    *[("files->webdataset", point) for point in POINTS if point != "mid-write"],
    *[("files->parquet", p) for p in ("intent-written", "journalled", "half-removed")],
    *[("webdataset->files", p) for p in ("mid-write", "first-named", "half-removed")],
    ("webdataset->parquet", "journalled"),
    *[("wav->flac", p) for p in ("first-named", "half-removed")],
    *[("webdataset(3)->parquet(4)", p) for p in ("mid-batch", "journalled", "half-removed")],
    *[("parquet(4)->webdataset(3)", p) for p in ("mid-batch", "half-removed")],
]


@pytest.mark.parametrize(("switch", "point"), CASES, ids=[f"{s}@{p}" for s, p in CASES])
def test_a_kill_during_a_repack_then_a_rerun_keeps_every_id_once(sources, tmp_path, switch, point):
    manifest, made = sources
    source, extra = SWITCHES[switch]
    out = tmp_path / "out"
    shutil.copytree(made[source][0], out)
    extra = extra if "--shard-rows" in extra else (*extra, "--shard-rows", 3)
    kill_at(point, manifest, out, *extra)
    assert set(copies(out)) == set(IDS)  # nothing lost: each id in its old layout or its new
    assert recorded_where_it_is(out)  # and every record names a copy that is there
    assert metadata_lists_what_is_there(out)  # no view names a file taken out
    r = qtts(manifest, out, *extra, QTTS_FAKE_LOAD_FAIL="1")  # the rerun needs no model either
    assert r.exit_code == 0, r.stderr
    s = summary(r)  # the rows the killed run moved are skipped, the rest moved now: none made
    assert (s["ok"], s["skipped"] + s["repacked"], s["pending"]) == (0, ROWS, 0), s
    assert_same_rows(out, made[source][1])


@pytest.mark.parametrize(("made_in", "into"), [(("webdataset", 3), ("parquet", 4)),
                                              (("parquet", 4), ("webdataset", 3))])  # fmt: skip
def test_each_source_shard_is_taken_out_once_whatever_the_batch_size(
    manifest, tmp_path, monkeypatch, made_in, into
):
    """Batches of another size than the source shards: a source shard's old rows go once it
    has been read through, so each is removed once (never rewritten once per batch)."""
    out = tmp_path / "out"
    assert qtts(manifest, out, "--output", made_in[0], "--shard-rows", made_in[1]).exit_code == 0
    before = audio_and_codes(out)
    sources = [f"data/{p.name}" for p in (out / "data").iterdir()]
    touched = count_take_outs(monkeypatch)
    r = qtts(manifest, out, "--output", into[0], "--shard-rows", into[1], QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0 and summary(r)["repacked"] == ROWS, r.stderr
    assert touched == Counter(sources)  # each source shard once: emptied, so removed
    assert_same_rows(out, before)
    assert shard_sizes(out) == ([1, 3, 3, 3] if into[1] == 3 else [2, 4, 4])  # batches full


def test_a_kill_while_retracting_files_leaves_no_view_naming_them(sources, tmp_path):
    """Rows redone in an archive layout are first taken out of their plain files; metadata.jsonl
    goes before the first of them, so a kill there leaves no view naming a missing file."""
    _, made = sources
    out = tmp_path / "out"
    shutil.copytree(made["files"][0], out)
    changed = tmp_path / "changed.parquet"  # every text changed: every row redone
    pq.write_table(pa.table({"id": IDS, "text": [f"Row {i}, said again." for i in IDS]}), changed)
    args = ("--output", "webdataset", "--input-moved")
    kill_at((f"{STORES}.retract:_take_out", 2, "before"), changed, out, *args)
    assert (out / "r09.wav").exists() and not (out / "r00.wav").exists()  # killed in between
    assert metadata_lists_what_is_there(out)
    r = qtts(changed, out, "--output", "webdataset")
    assert r.exit_code == 0, r.stderr
    assert copies(out) == Counter(IDS) and list(out.glob("*.wav")) == []


def test_a_rerun_in_another_layout_finishes_the_killed_repack_first(sources, tmp_path):
    manifest, made = sources
    out = tmp_path / "out"
    shutil.copytree(made["files"][0], out)
    kill_at("first-named", manifest, out, "--output", "webdataset", "--shard-rows", 3)
    r = qtts(manifest, out, "--output", "parquet", QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0, r.stderr
    assert (summary(r)["repacked"], summary(r)["ok"]) == (ROWS, 0)  # each moved once more
    assert_same_rows(out, made["files"][1])
    assert list((out / "data").glob("*.tar")) == [] and list(out.glob("*.wav")) == []


def test_a_kill_while_a_switch_resynthesizes_leaves_a_readable_out_dir(tmp_path, write_manifest):
    """The issue's out dir: rows redone in the new layout (their texts changed), killed when the
    first shard appears, leaves pending records and ok ones of the same run in the journal."""
    rows = [{"id": i, "text": f"Row {i} as first written."} for i in IDS]
    manifest = write_manifest(rows)
    out = tmp_path / "out"
    assert qtts(manifest, out).exit_code == 0
    write_manifest([{**r, "text": r["text"].replace("first", "then")} for r in rows])
    args = ("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o", out, "-q",
            "--save-codes", "--output", "webdataset", "--shard-rows", 3)  # fmt: skip
    proc = subprocess.Popen(qtts_cmd(*args), env=fake_env(QTTS_FAKE_DELAY="0.3"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list((out / "data").glob("*.tar")):
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    journal = [json.loads(line) for line in (out / ".qtts" / "journal.jsonl").open()]
    statuses = Counter(r["status"] for r in journal)
    assert statuses["pending"] == ROWS and 0 < statuses["ok"] < ROWS
    assert len({r["run"] for r in journal}) == 1
    r = qtts(manifest, out, "--output", "webdataset", "--shard-rows", 3)
    assert r.exit_code == 0, r.stderr
    assert copies(out) == Counter(IDS) and litter(out) == []


def test_a_signal_mid_repack_stops_between_rows_and_the_rerun_finishes(finished, manifest,
                                                                        monkeypatch):  # fmt: skip
    import signal

    from qtts.core.jobs.execution.interrupt import Interrupted, StopSignals

    out, before = finished
    calls = Counter()
    check = StopSignals.check

    def sigterm_at_the_fifth_row(self):
        calls["rows"] += 1
        if calls["rows"] == 5:
            raise Interrupted(signal.SIGTERM)
        check(self)

    monkeypatch.setattr(StopSignals, "check", sigterm_at_the_fifth_row)
    r = qtts(manifest, out, "--output", "parquet", "--shard-rows", 3, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 143, r.stderr
    s = summary(r)  # one shard committed; the rows not reached were done before: skipped
    assert (s["repacked"], s["ok"], s["skipped"]) == (3, 0, ROWS - 3)
    assert copies(out) == Counter(IDS) and litter(out) == []
    monkeypatch.setattr(StopSignals, "check", check)
    r = qtts(manifest, out, "--output", "parquet", "--shard-rows", 3, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0, r.stderr  # the three moved are skipped, never counted as made
    assert (summary(r)["repacked"], summary(r)["skipped"], summary(r)["ok"]) == (ROWS - 3, 3, 0)
    assert_same_rows(out, before)


@pytest.mark.parametrize("switch", [("--format", "flac"), ("--output", "webdataset")])
def test_a_damaged_file_stays_where_it_is_and_the_rest_move(finished, manifest, switch):
    """Transcoded, or copied as it is (its header is read first): a damaged WAV of the recorded
    size is not moved."""
    out, _ = finished
    (out / "r04.wav").write_bytes(b"RIFF" + b"\0" * ((out / "r04.wav").stat().st_size - 4))
    r = qtts(manifest, out, *switch, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0, r.stderr
    assert (summary(r)["repacked"], summary(r)["skipped"], summary(r)["ok"]) == (ROWS - 1, 1, 0)
    assert "cannot read" in r.stderr and "1 row(s) could not be read back" in r.stderr
    assert copies(out) == Counter(IDS) and (out / "r04.wav").exists()


def test_a_full_disk_mid_repack_is_one_line_and_loses_nothing(finished, manifest, monkeypatch):
    import errno
    import os

    from qtts.core.jobs.output.stores.layout import RepackTarget

    out, before = finished
    calls = Counter()
    write = RepackTarget.write

    def full_at_the_fifth(target, final, data):
        calls["writes"] += 1
        if calls["writes"] == 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(target, final, data)

    r = qtts(manifest, out, "--output", "webdataset", "--shard-rows", 3, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0
    monkeypatch.setattr(RepackTarget, "write", full_at_the_fifth)  # back to files: disk full
    r = qtts(manifest, out, "--output", "files", "--format", "flac", QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 1
    (line,) = r.stderr.strip().splitlines()[-1:]
    assert line.startswith("Error: disk full writing ") and "Traceback" not in r.stderr
    assert copies(out) == Counter(IDS) and litter(out) == []
    monkeypatch.setattr(RepackTarget, "write", write)
    r = qtts(manifest, out, "--format", "flac", QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0, r.stderr
    assert_same_rows(out, before)


@pytest.mark.parametrize("point", ["journalled", "mid-batch"])
def test_results_refuses_a_switch_a_kill_left_part_way(sources, tmp_path, point):
    """A kill -9 during a switch from files to shards leaves rows in both layouts until the next
    run: `journalled`, the committed batch's rows both as WAV files and as tar members;
    `mid-batch`, some rows moved and the rest not. `qtts results` before that run refuses in
    one line that says to rerun the job (loaders would get part of the rows), and leaves the
    views as the killed run left them; while a run holds the shard's lock the switch is its
    own, not refused. After the rerun every row loads."""
    manifest, made = sources
    out = tmp_path / "out"
    shutil.copytree(made["files"][0], out)
    switch = ("--output", "webdataset", "--shard-rows", 3)
    kill_at(point, manifest, out, *switch)
    views = ("results.parquet", "metadata.jsonl", "README.md")
    before = {name: (out / name).read_bytes() for name in views if (out / name).exists()}
    r = CliRunner().invoke(app, ["results", str(out)])
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert r.exit_code == 1 and len(errors) == 1, r.stderr
    assert "killed part-way" in errors[0] and "rerun the job" in errors[0], errors
    assert {name: (out / name).read_bytes() for name in views if (out / name).exists()} == before
    from filelock import FileLock

    with FileLock(str(out / ".qtts" / "run.lock")):  # a run going: mid-switch, not killed
        assert "killed part-way" not in CliRunner().invoke(app, ["results", str(out)]).stderr
    r = qtts(manifest, out, *switch, QTTS_FAKE_LOAD_FAIL="1")  # the rerun needs no model
    assert r.exit_code == 0, r.stderr
    r = CliRunner().invoke(app, ["results", str(out)])
    assert r.exit_code == 0 and summary(r)["ok"] == ROWS, r.stderr
    assert copies(out) == Counter(IDS)
