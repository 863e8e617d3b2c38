"""A shard of several files (the test format pair_format.PAIR: a JSON lines part beside its key
tar) through the seam, which knows no format: sealed with the key named last, temps owned by
their job shard, a kill between two renames healed by taking the rows out, retraction and
removal over every part, a repack naming every part, members read back for `qtts score`."""

from __future__ import annotations

import pyarrow as pa
from pair_format import AUDIO, META
from store_rows import archive_store, journalled, row

from qtts.core.jobs.output.stores import retract, shard_files
from qtts.core.jobs.output.stores.layout import repack_temp
from qtts.core.jobs.output.stores.member_reader import MemberReader
from qtts.core.jobs.output.stores.open_store import StoreSpec
from qtts.core.jobs.output.stores.presence import list_out_dir, present
from qtts.core.jobs.output.stores.repack_commit import _name
from qtts.core.jobs.state.atomic_files import TEMP_MARK
from qtts.core.jobs.state.journal import Journal


def _store(tmp_path, shard_rows=2):
    journal = Journal(tmp_path / "j.jsonl")
    store = archive_store(tmp_path, "pair", journal, save_codes=True, prefix="shard-0-of-2-t",
                          shard_rows=shard_rows)  # fmt: skip
    return store, journal


def _names(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "data").iterdir())


def test_a_shard_is_sealed_every_part_its_key_last(tmp_path, pair, monkeypatch):
    renamed = []
    rename = shard_files._rename
    monkeypatch.setattr(shard_files, "_rename", lambda t, f: (renamed.append(f.name), rename(t, f)))
    store, journal = _store(tmp_path)
    for i in range(3):
        store.submit(row(f"r.{i}", seed=i, codes=True)).result()
    store.close()
    first, second = "shard-0-of-2-t-000000", "shard-0-of-2-t-000001"
    assert renamed == [f"meta.{first}.jsonl", f"audio.{first}.tar",
                       f"meta.{second}.jsonl", f"audio.{second}.tar"]  # fmt: skip
    assert _names(tmp_path) == sorted(renamed)
    records = journalled(journal)
    assert records[2]["file"] == "data/audio.shard-0-of-2-t-000001.tar#r.2.wav"
    assert pair.keys_in(META, tmp_path / "data" / f"meta.{first}.jsonl") == ["r.0", "r.1"]
    reader = MemberReader(tmp_path)
    assert reader.source(records[1]["file"])().read()[:4] == b"RIFF"


def test_temps_belong_to_their_job_shard(pair):
    own = StoreSpec(layout="pair", prefix="shard-0-of-2-")

    def owns(final: str) -> bool:
        return own.owns(final, owns_row=lambda row_id: row_id == "mine")

    assert owns("data/meta.shard-0-of-2-abc-000000.jsonl")
    assert owns("data/audio.shard-0-of-2-abc-u12-000003.tar")
    assert not owns("data/meta.shard-1-of-2-abc-000000.jsonl")
    assert not owns("data/notes.txt") and not owns("data/shard-0-of-2-x.zip")
    assert owns("mine.wav") and owns("mine.codes.npy")  # the files layout's, of its rows
    assert not owns("theirs.wav") and not owns("results.parquet")


def test_a_kill_between_two_renames_is_healed_by_taking_the_rows_out(tmp_path, pair, monkeypatch):
    def killed_after_the_first(tmp, final):
        if final.name.startswith("audio."):
            raise SystemExit(9)  # as a kill -9 there: the key part never takes its name
        tmp.replace(final)

    store, journal = _store(tmp_path)
    monkeypatch.setattr(shard_files, "_rename", killed_after_the_first)
    store.submit(row("a")).result()
    try:
        store.submit(row("b")).result()
    except SystemExit:
        pass
    monkeypatch.undo()
    records = pa.Table.from_pylist(journalled(journal))
    assert records["id"].to_pylist() == ["a", "b"]  # journalled before the renames
    there = present(records["file"], records["bytes"], list_out_dir(tmp_path))
    assert not there.any()  # the key is missing: both are redone
    assert "meta.shard-0-of-2-t-000000.jsonl" in _names(tmp_path)  # a part left alone
    retract.take_out_rows(tmp_path, records["id"], records["file"])
    assert [n for n in _names(tmp_path) if TEMP_MARK not in n] == []


def test_retraction_and_removal_cover_every_part(tmp_path, pair):
    store, journal = _store(tmp_path, shard_rows=10)
    for i in "abc":
        store.submit(row(i)).result()
    store.close()
    records = pa.Table.from_pylist(journalled(journal))
    retract.take_out_rows(tmp_path, records["id"][1:2], records["file"][1:2])
    data = tmp_path / "data"
    assert pair.keys_in(META, data / "meta.shard-0-of-2-t-000000.jsonl") == ["a", "c"]
    assert pair.keys_in(AUDIO, data / "audio.shard-0-of-2-t-000000.tar") == ["a", "c"]
    (data / "notes.txt").write_text("not a shard")
    retract.remove_every_archive(tmp_path)
    assert _names(tmp_path) == ["notes.txt"]


def test_a_repack_names_every_part(tmp_path, pair):
    spec = StoreSpec(layout="pair", shard_rows=10)
    target = spec.fmt.repack_target(tmp_path, spec, "run")
    record = {"id": "a", "sample_rate": 24000, "duration_s": 0.1, "file": "a.wav"}
    target.add(record, b"RIFF....", None, "a.wav")
    (row_record,) = target.seal()
    key = "data/audio.run-repack-000000.tar"
    assert row_record["file"] == f"{key}#a.wav"
    parts = ["audio.run-repack-000000.tar", "meta.run-repack-000000.jsonl"]
    assert all(repack_temp(tmp_path / "data" / n).exists() for n in parts)
    assert _name(tmp_path, pa.array([key, key])).tolist() == [True, True]
    assert _names(tmp_path) == parts
