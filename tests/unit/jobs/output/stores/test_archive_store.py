"""Archive shards: sealed every --shard-rows rows, journalled only once durable, never visible
half-written; a kill loses only the open shard."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from store_rows import archive_store, journalled, row

from qtts.core.jobs.output.stores.registry import find
from qtts.core.jobs.state.atomic_files import TEMP_MARK, cleanup_temp_files
from qtts.core.jobs.state.journal import Journal


def _store(tmp_path, layout="webdataset", **kw):
    journal = Journal(tmp_path / "j.jsonl")
    return archive_store(tmp_path, layout, journal, **kw), journal


def _visible(tmp_path):
    return sorted(p.name for p in (tmp_path / "data").iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("layout", ["webdataset", "parquet"])
def test_rows_are_journalled_when_their_shard_is_sealed(tmp_path, layout):
    store, journal = _store(tmp_path, layout)
    fmt = find(layout)
    suffix = fmt.key.tail
    for i in range(3):
        store.submit(row(f"r{i}", seed=i)).result()
    assert _visible(tmp_path) == [f"w-000000{suffix}"]  # r2 sits in the open shard
    assert [r["id"] for r in journalled(journal)] == ["r0", "r1"]
    store.close()
    assert _visible(tmp_path) == [f"w-000000{suffix}", f"w-000001{suffix}"]
    records = journalled(journal)
    assert [r["id"] for r in records] == ["r0", "r1", "r2"]
    assert records[2]["file"].startswith(f"data/w-000001{suffix}#")
    assert fmt.keys_in(fmt.key, tmp_path / "data" / f"w-000001{suffix}") == ["r2"]
    assert not [p for p in (tmp_path / "data").iterdir() if TEMP_MARK in p.name]


def test_dropping_the_open_shard_leaves_nothing(tmp_path):
    store, journal = _store(tmp_path, shard_rows=10)
    store.submit(row("r0")).result()
    store.close(wait=False)
    assert list((tmp_path / "data").iterdir()) == [] and journalled(journal) == []


def test_an_old_open_shard_is_sealed_at_its_next_row(tmp_path):
    store, journal = _store(tmp_path, shard_rows=100, max_age_s=0.0)
    store.submit(row("r0")).result()
    assert len(_visible(tmp_path)) == 1 and len(journalled(journal)) == 1
    store.close()


def test_published_finds_this_writers_rows(tmp_path):
    store, _ = _store(tmp_path)
    for i in range(3):
        store.submit(row(f"r{i}", n=4800)).result()
    store.close()
    assert store.published(["r1", "r2", "x"], since=0.0) == {"r1": 0.2, "r2": 0.2}


KILLED = """
import os, sys
sys.path.insert(0, {here!r})
from pathlib import Path
from store_rows import archive_store, row
from qtts.core.jobs.state.journal import Journal
out = Path(sys.argv[1])
store = archive_store(out, "webdataset", Journal(out / "j.jsonl"))
for i in range(3):
    store.submit(row(f"r{{i}}")).result()
os._exit(9)  # a kill -9 with r2 in the open shard
"""


def test_kill_loses_only_the_open_shard(tmp_path):
    here = str(__import__("pathlib").Path(__file__).parent)
    script = textwrap.dedent(KILLED.format(here=here))
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=False)
    assert _visible(tmp_path) == ["w-000000.tar"]
    assert [r["id"] for r in journalled(Journal(tmp_path / "j.jsonl"))] == ["r0", "r1"]
    temps = [p.name for p in (tmp_path / "data").iterdir() if TEMP_MARK in p.name]
    assert len(temps) == 1  # the open shard's, removed by the next run
    assert cleanup_temp_files(tmp_path / "data", owns=lambda name: name.startswith("w")) == 1


def test_a_retried_writer_never_replaces_a_sealed_shard(tmp_path):
    first, journal = _store(tmp_path)  # a Ray unit's first attempt: seals a, b; dies with c open
    for i in "abc":
        first.submit(row(i)).result()
    first.close(wait=False)
    again, _ = _store(tmp_path)  # the retry: same unit, same names
    assert set(again.published(list("abcd"), since=0.0)) == {"a", "b"}
    for i in "cd":
        again.submit(row(i)).result()
    again.close()
    fmt = find("webdataset")
    assert _visible(tmp_path) == ["w-000000.tar", "w-000001.tar"]
    assert fmt.keys_in(fmt.key, tmp_path / "data" / "w-000000.tar") == ["a", "b"]
    assert fmt.keys_in(fmt.key, tmp_path / "data" / "w-000001.tar") == ["c", "d"]


FIRST_ROW = [None]  # the first row's first sample: how the slow encoder knows it


def test_rows_encoded_apart_are_appended_in_the_order_they_came(tmp_path, monkeypatch):
    from qtts.core.jobs.output import writer as archive  # the stores encode through it

    encode = archive.encode_audio

    def late_first(audio, *args):  # the first row's encoding finishes last
        time.sleep(0.2 if audio[0] == FIRST_ROW[0] else 0.0)
        return encode(audio, *args)

    monkeypatch.setattr(archive, "encode_audio", late_first)
    store, journal = _store(tmp_path, shard_rows=10, encoders=4)
    rows = [row(f"r{i}", seed=i) for i in range(5)]
    FIRST_ROW[0] = rows[0].audio[0]
    futures = [store.submit(r) for r in rows]
    for f in futures:
        f.result()
    store.close()
    assert [r["id"] for r in journalled(journal)] == [f"r{i}" for i in range(5)]
    fmt = find("webdataset")
    assert fmt.keys_in(fmt.key, tmp_path / "data" / "w-000000.tar") == [f"r{i}" for i in range(5)]
    busy = store.clock.busy()
    assert busy["encode"] >= 0.2 and busy["write"] > 0 and busy["journal"] > 0
