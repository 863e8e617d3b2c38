"""A layout or format switch on an out dir of finished rows: the audio is repacked (tar members,
Parquet rows, files; wav -> flac transcoded), never made again, and the model is never loaded
(QTTS_FAKE_LOAD_FAIL makes any load fail the run). A kill -9 at each step of a repack, and
during a switch that does synthesize, leaves an out dir the next run opens: exit 0 and every id
exactly once. Fake model; the kills in a subprocess (tests/kill_points.py), the rest in process."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from fakes import fake_env, qtts_cmd
from typer.testing import CliRunner

from qtts.cli.app import app

pytestmark = pytest.mark.usefixtures("fake_model")
ROWS = 10
IDS = [f"r{i:02d}" for i in range(ROWS)]
KILL_POINTS = Path(__file__).resolve().parents[1] / "kill_points.py"
STORES = "qtts.core.jobs.output.stores"


def qtts(manifest, out, *extra, **env):
    args = ["batch", manifest, "-o", out, "--model", "fake-0.6b", "--speaker", "vivian",
            "--save-codes", *extra]  # fmt: skip
    return CliRunner().invoke(app, [str(a) for a in args], env=env or None)


def summary(result) -> dict:
    return json.loads(result.stdout.strip().splitlines()[-1])


def copies(out: Path) -> Counter:
    """Every id's audio in the out dir: plain files, tar samples, Parquet rows."""
    found = Counter(p.name.split(".")[0] for p in out.iterdir() if p.suffix in (".wav", ".flac"))
    for shard in sorted((out / "data").glob("*.tar")):
        with tarfile.open(shard) as tar:
            found.update(json.loads(tar.extractfile(m).read())["id"]
                         for m in tar if m.name.endswith(".json"))  # fmt: skip
    for shard in sorted((out / "data").glob("*.parquet")):
        found.update(pq.read_table(shard, columns=["id"])["id"].to_pylist())
    return found


def audio_and_codes(out: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """id -> (16-bit samples, codes) wherever the row is."""
    got = {}
    for p in out.iterdir():
        if p.suffix in (".wav", ".flac"):
            row_id = p.name.split(".")[0]
            codes = np.load(out / f"{row_id}.codes.npy")
            got[row_id] = (sf.read(p, dtype="int16")[0], codes)
    for shard in sorted((out / "data").glob("*.tar")):
        samples: dict[str, dict[str, bytes]] = {}
        with tarfile.open(shard) as tar:
            for m in tar:
                key, _, ext = m.name.partition(".")
                samples.setdefault(key, {})[ext] = tar.extractfile(m).read()
        for sample in samples.values():
            audio = sample.get("wav") or sample["flac"]
            got[json.loads(sample["json"])["id"]] = (
                sf.read(io.BytesIO(audio), dtype="int16")[0],
                np.load(io.BytesIO(sample["codes.npy"])),
            )
    for shard in sorted((out / "data").glob("*.parquet")):
        for row in pq.read_table(shard, columns=["id", "audio", "codes"]).to_pylist():
            audio = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="int16")[0]
            got[row["id"]] = (audio, np.load(io.BytesIO(row["codes"])))
    return got


def metadata_lists_what_is_there(out: Path) -> bool:
    """metadata.jsonl (the AudioFolder view), where there is one, names only files that are there
    (an AudioFolder loader fails on a missing one)."""
    path = out / "metadata.jsonl"
    if not path.exists():
        return True
    names = [json.loads(line)["file_name"] for line in path.read_text().splitlines()]
    return all((out / name).exists() for name in names)


def litter(out: Path) -> list[str]:
    return [p.name for p in out.rglob("*") if ".qtts-tmp-" in p.name]


@pytest.fixture
def manifest(write_manifest):
    return write_manifest([{"id": i, "text": f"Row {i} of a finished job."} for i in IDS])


@pytest.fixture
def finished(manifest, tmp_path):
    """An out dir of ROWS finished WAVs with codes, and what they hold."""
    out = tmp_path / "out"
    assert qtts(manifest, out).exit_code == 0
    return out, audio_and_codes(out)


def assert_same_rows(out: Path, before: dict) -> None:
    assert copies(out) == Counter(IDS)
    after = audio_and_codes(out)
    for row_id, (audio, codes) in before.items():
        np.testing.assert_array_equal(after[row_id][0], audio)
        np.testing.assert_array_equal(after[row_id][1], codes)
    results = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["status"] for r in results] == ["ok"] * ROWS
    assert litter(out) == [] and not list((out / ".qtts").glob("repack*"))


@pytest.mark.parametrize(
    "steps",
    [
        (("--output", "webdataset"), ("--output", "parquet"), ()),
        (("--output", "parquet", "--format", "flac"), ("--output", "webdataset"), ()),
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


def made_at(out: Path) -> dict[str, float]:
    """Each row's record time: the stamp its scores are kept by."""
    from qtts.core.jobs.state.shard_state import read_all

    records = read_all(out, ("id", "t"))
    return dict(zip(records["id"].to_pylist(), records["t"].to_pylist(), strict=True))


def recorded_where_it_is(out: Path) -> bool:
    """Every id's latest record is ok and its audio is where the record says (the views)."""
    from qtts.core.jobs.output.stores.listing import list_out_dir
    from qtts.core.jobs.output.stores.presence import present
    from qtts.core.jobs.state.shard_state import read_all

    records = read_all(out, ("id", "status", "file", "bytes"))
    there = present(records["file"], records["bytes"], list_out_dir(out))
    statuses = set(records["status"].to_pylist())
    return sorted(records["id"].to_pylist()) == IDS and bool(there.all()) and statuses == {"ok"}


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

# The steps of a repack, in order: (the function called through, which call, before it runs or
# after it returns)
POINTS = {
    "mid-batch": (f"{STORES}.repack:commit", 2, "before"),  # a batch done, the next one's temps
    "mid-write": (f"{STORES}.repack_targets:_write", 5, "before"),  # files: the first batch's
    "intent-written": (f"{STORES}.repack_commit:_name", 1, "before"),  # the commit point
    "first-named": (f"{STORES}.repack_commit:_name", 2, "after"),  # the first new shard appears
    "journalled": (f"{STORES}.repack_commit:take_out_rows", 1, "before"),  # old copies all there
    "half-removed": (f"{STORES}.retract:_take_out", 2, "before"),  # one old copy gone
    "intent-left": (f"{STORES}.repack_commit:unlink_quietly", 1, "before"),  # all but the intent
}


def kill_at(point: str | tuple, manifest, out, *extra) -> None:
    target, n, when = POINTS[point] if isinstance(point, str) else point
    args = ["batch", manifest, "-o", out, "--speaker", "vivian", "--model", "fake-0.6b",
            "--save-codes", "-q", *extra]  # fmt: skip
    cmd = [sys.executable, str(KILL_POINTS), target, str(n), when, "--", *map(str, args)]
    proc = subprocess.run(cmd, env=fake_env(QTTS_FAKE_LOAD_FAIL="1"), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 9, proc.stderr  # killed where asked, not before or after


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Finished out dirs to copy: files (wav), webdataset (shards of 3 rows) and parquet (of 4),
    and what their rows hold."""
    root = tmp_path_factory.mktemp("sources")
    manifest = root / "m.parquet"
    pq.write_table(pa.table({"id": IDS, "text": [f"Row {i} of a finished job." for i in IDS]}),
                   manifest)  # fmt: skip
    made = {}
    for layout, rows in (("files", 3), ("webdataset", 3), ("parquet", 4)):
        out = root / layout
        r = subprocess.run(qtts_cmd("batch", manifest, "-o", out, "--speaker", "vivian", "--model",
                                    "fake-0.6b", "--save-codes", "-q", "--output", layout,
                                    "--shard-rows", rows),
                           env=fake_env(), capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr
        made[layout] = (out, audio_and_codes(out))
    return manifest, made


SWITCHES = {
    "files->webdataset": ("files", ("--output", "webdataset")),
    "files->parquet": ("files", ("--output", "parquet")),
    "webdataset->files": ("webdataset", ()),
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
    assert summary(r)["ok"] == 0
    assert_same_rows(out, made[source][1])


@pytest.mark.parametrize(("made_in", "into"), [(("webdataset", 3), ("parquet", 4)),
                                              (("parquet", 4), ("webdataset", 3))])  # fmt: skip
def test_each_source_shard_is_taken_out_once_whatever_the_batch_size(
    manifest, tmp_path, monkeypatch, made_in, into
):
    """Batches of another size than the source shards: a source shard's old rows go once it
    has been read through, so each is removed once (never rewritten once per batch)."""
    from qtts.core.jobs.output.stores import retract

    out = tmp_path / "out"
    assert qtts(manifest, out, "--output", made_in[0], "--shard-rows", made_in[1]).exit_code == 0
    before = audio_and_codes(out)
    sources = [f"data/{p.name}" for p in (out / "data").iterdir()]
    touched = Counter()
    take_out = retract._take_out

    def counted(out_dir, container, ids, keep_codes):
        touched[container] += 1
        take_out(out_dir, container, ids, keep_codes)

    monkeypatch.setattr(retract, "_take_out", counted)
    r = qtts(manifest, out, "--output", into[0], "--shard-rows", into[1], QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0 and summary(r)["repacked"] == ROWS, r.stderr
    assert touched == Counter(sources)  # each source shard once: emptied, so removed
    assert_same_rows(out, before)
    assert shard_sizes(out) == ([1, 3, 3, 3] if into[1] == 3 else [2, 4, 4])  # batches full


def shard_sizes(out: Path) -> list[int]:
    sizes = []
    for shard in (out / "data").iterdir():
        if shard.suffix == ".tar":
            with tarfile.open(shard) as tar:
                sizes.append(sum(m.name.endswith(".json") for m in tar))
        else:
            sizes.append(pq.ParquetFile(shard).metadata.num_rows)
    return sorted(sizes)


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
    proc = subprocess.Popen(qtts_cmd(*args), env=fake_env(QTTS_FAKE_DELAY="0.1"),
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
    assert r.exit_code == 0 and summary(r)["repacked"] == ROWS - 3
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

    from qtts.core.jobs.output.stores import repack_targets

    out, before = finished
    calls = Counter()
    write = repack_targets._write

    def full_at_the_fifth(target, final, data):
        calls["writes"] += 1
        if calls["writes"] == 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(target, final, data)

    r = qtts(manifest, out, "--output", "webdataset", "--shard-rows", 3, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0
    monkeypatch.setattr(repack_targets, "_write", full_at_the_fifth)  # back to files: disk full
    r = qtts(manifest, out, "--output", "files", "--format", "flac", QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 1
    (line,) = r.stderr.strip().splitlines()[-1:]
    assert line.startswith("Error: disk full writing ") and "Traceback" not in r.stderr
    assert copies(out) == Counter(IDS) and litter(out) == []
    monkeypatch.setattr(repack_targets, "_write", write)
    r = qtts(manifest, out, "--format", "flac", QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0, r.stderr
    assert_same_rows(out, before)
