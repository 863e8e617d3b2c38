"""A layout switch's edges: audio cut short is never packed as whole, a killed run's batches
from one source shard are taken out of it at once, the counts after a stop and a rerun, and
switches without --save-codes and in a sharded job between archives. Fake model; the kills in
a subprocess (tests/kill_points.py), the rest in process."""

from __future__ import annotations

import shutil
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from layout_switch import (
    IDS,
    ROWS,
    STORES,
    assert_same_rows,
    audio_and_codes,
    copies,
    count_take_outs,
    kill_at,
    make_sources,
    qtts,
    summary,
)
from typer.testing import CliRunner

from qtts.cli.app import app

pytestmark = pytest.mark.usefixtures("fake_model")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return make_sources(tmp_path_factory.mktemp("sources"))


@pytest.fixture
def copied(sources, tmp_path):
    """copied(layout) -> a fresh copy of the finished out dir in that layout, and what it holds."""
    _, made = sources

    def copy(layout: str):
        out = tmp_path / "out"
        shutil.copytree(made[layout][0], out)
        return out, made[layout][1]

    return copy


def cut_short_in_parquet(out, row_id: str) -> None:
    """Halve one row's WAV bytes in its Parquet shard, as a damaged disk or hand would: its header
    still reads as audio (soundfile takes the samples that are there)."""
    (shard,) = [p for p in (out / "data").glob("*.parquet")
                if row_id in pq.read_table(p, columns=["id"])["id"].to_pylist()]  # fmt: skip
    table = pq.read_table(shard)
    rows = table.to_pylist()
    for row in rows:
        if row["id"] == row_id:
            row["audio"]["bytes"] = row["audio"]["bytes"][: len(row["audio"]["bytes"]) // 2]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)


def test_a_wav_cut_short_in_a_shard_stays_where_it_is(sources, copied):
    """Copied as it is (the same format), its header alone would pass: its size says it is not
    what was written, so it is not packed into the new layout."""
    manifest, _ = sources
    out, before = copied("parquet")
    cut_short_in_parquet(out, "r04")
    r = qtts(manifest, out, "--output", "files", QTTS_FAKE_LOAD_FAIL="1")  # back to files
    assert r.exit_code == 0, r.stderr
    assert (summary(r)["repacked"], summary(r)["skipped"], summary(r)["ok"]) == (ROWS - 1, 1, 0)
    assert "bytes where" in r.stderr and "1 row(s) could not be read back" in r.stderr
    assert copies(out) == Counter(IDS) and not (out / "r04.wav").exists()
    after = audio_and_codes(out)
    for row_id in set(IDS) - {"r04"}:
        np.testing.assert_array_equal(after[row_id][0], before[row_id][0])


def test_a_plain_wav_cut_short_is_made_again_not_packed(sources, copied):
    manifest, _ = sources
    out, before = copied("files")
    wav = out / "r04.wav"
    wav.write_bytes(wav.read_bytes()[: wav.stat().st_size // 2])
    r = qtts(manifest, out, "--output", "webdataset")
    assert r.exit_code == 0, r.stderr
    assert (summary(r)["repacked"], summary(r)["ok"], summary(r)["skipped"]) == (ROWS - 1, 1, 0)
    assert copies(out) == Counter(IDS) and list(out.glob("*.wav")) == []
    np.testing.assert_array_equal(audio_and_codes(out)["r04"][0], before["r04"][0])  # seeded


def test_a_killed_runs_batches_leave_their_source_shard_at_once(sources, tmp_path, monkeypatch):
    """One source shard of ten rows into batches of three: the killed run commits three batches
    and holds the shard's rows back (it was still reading it); the rerun takes them out of it at
    once, then moves the last row: the shard rewritten once, then removed, never once per batch."""
    manifest, _ = sources
    out = tmp_path / "out"
    assert qtts(manifest, out, "--output", "parquet", "--shard-rows", ROWS).exit_code == 0
    before = audio_and_codes(out)
    (source,) = [f"data/{p.name}" for p in (out / "data").iterdir()]
    switch = ("--output", "webdataset", "--shard-rows", 3)
    kill_at((f"{STORES}.repack:commit", 4, "before"), manifest, out, *switch)
    assert len(list((out / ".qtts").glob("repack.*.parquet"))) == 3
    touched = count_take_outs(monkeypatch)
    r = qtts(manifest, out, *switch, QTTS_FAKE_LOAD_FAIL="1")
    assert r.exit_code == 0, r.stderr
    assert (summary(r)["repacked"], summary(r)["skipped"], summary(r)["ok"]) == (1, ROWS - 1, 0)
    assert touched == Counter({source: 2})
    assert_same_rows(out, before)


@pytest.mark.parametrize("point", ["journalled", "half-removed"])
def test_the_counts_after_a_killed_repack_and_a_rerun_that_synthesizes_too(
    copied, write_manifest, point
):
    """The rows the killed run moved are skipped by the rerun, never counted as made: ok counts
    only the row the rerun synthesizes."""
    out, _ = copied("files")
    rows = [{"id": i, "text": f"Row {i} of a finished job."} for i in IDS]
    rows[0]["text"] = "Row r00, said again."
    changed = write_manifest(rows, name="changed.parquet")
    switch = ("--output", "webdataset", "--shard-rows", 3)
    kill_at(point, changed, out, *switch, "--input-moved")
    r = qtts(changed, out, *switch, "--input-moved")
    assert r.exit_code == 0, r.stderr
    s = summary(r)
    assert s["ok"] == 1 and s["skipped"] + s["repacked"] == ROWS - 1, s
    assert copies(out) == Counter(IDS) and list(out.glob("*.wav")) == []


def without_codes(manifest, out, *extra):
    args = ["batch", manifest, "-o", out, "--model", "fake-0.6b", "--speaker", "vivian", *extra]
    return CliRunner().invoke(app, [str(a) for a in args], env={"QTTS_FAKE_LOAD_FAIL": "1"})


def assert_same_audio_no_codes(out, before: dict) -> None:
    after = audio_and_codes(out)
    assert sorted(after) == IDS and {codes is None for _, codes in after.values()} == {True}
    for row_id, (audio, _) in before.items():
        np.testing.assert_array_equal(after[row_id][0], audio)


def test_an_archive_switch_to_files_without_save_codes_writes_no_codes(sources, copied):
    manifest, _ = sources
    out, before = copied("webdataset")
    r = without_codes(manifest, out, "--output", "files")
    assert r.exit_code == 0 and summary(r)["repacked"] == ROWS, r.stderr
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".wav") == [f"{i}.wav" for i in IDS]
    assert list(out.glob("*.codes.npy")) == [] and list((out / "data").iterdir()) == []
    assert_same_audio_no_codes(out, before)
    assert summary(without_codes(manifest, out))["skipped"] == ROWS


def test_a_sharded_job_switches_between_archives_without_codes(sources, tmp_path):
    """Each job shard (--num-shards 2 --shard-index k) moves its own rows from its webdataset
    shards into Parquet ones, codes dropped; the other's rows stay where they are meanwhile."""
    manifest, _ = sources
    out = tmp_path / "out"
    made = ("--output", "webdataset", "--shard-rows", 3, "--num-shards", 2)
    for k in (0, 1):
        assert qtts(manifest, out, *made, "--shard-index", k).exit_code == 0
    before = audio_and_codes(out)
    switch = ("--output", "parquet", "--shard-rows", 4, "--num-shards", 2)
    moved = []
    for k in (0, 1):
        r = without_codes(manifest, out, *switch, "--shard-index", k)
        assert r.exit_code == 0 and summary(r)["ok"] == 0, r.stderr
        moved.append(summary(r)["repacked"])
        assert copies(out) == Counter(IDS)
        assert bool(list((out / "data").glob("*.tar"))) == (k == 0)  # shard 1's, until its run
    assert sum(moved) == ROWS and 0 not in moved and list((out / "data").glob("*.tar")) == []
    assert_same_audio_no_codes(out, before)
    assert summary(without_codes(manifest, out, *switch, "--shard-index", 0))["ok"] == 0
