"""Records, journals and the shard state: newest wins, cut lines, compaction, the
metadata writer's JSON."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qtts.core.jobs.output.stores.formats.files import METADATA_KEYS
from qtts.core.jobs.state import shard_state as state
from qtts.core.jobs.state.journal import Journal, json_lines, json_strings, read_journals
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.records import conform, latest, overlay, to_table
from qtts.core.jobs.state.shards import UNSHARDED, Shard


def rec(row_id, status="ok", t=1.0, **kw):
    return {"id": row_id, "status": status, "t": t, **kw}


def read_journal(path, columns=None):
    """(records, bytes read) of one journal."""
    table, sizes = read_journals([path], columns)
    return table, sizes[path]


def test_latest_keeps_the_newest_record_of_each_id_and_the_later_of_equal_times():
    table = to_table(
        [rec("a", "failed", 1), rec("b", t=5), rec("a", "ok", 2), rec("b", "failed", 5)]
    )
    got = {r["id"]: r["status"] for r in latest(table).to_pylist()}
    assert got == {"a": "ok", "b": "failed"}


def test_overlay_replaces_only_the_ids_it_has():
    base = to_table([rec("a"), rec("b"), rec("c")])
    newer = to_table([rec("b", "pending", 9)])
    got = {r["id"]: r["status"] for r in overlay(base, newer).to_pylist()}
    assert got == {"a": "ok", "b": "pending", "c": "ok"}


def test_an_outcome_beats_the_pending_record_of_its_own_run_whatever_the_clocks():
    """The driver marks a row pending; an actor whose clock runs behind then finishes it."""
    base = to_table([rec("a", "ok", 1, run="old")])
    journal = to_table([rec("a", "pending", 100, run="R"), rec("a", "ok", 50, run="R")])
    assert overlay(base, journal).to_pylist()[0]["status"] == "ok"
    later = to_table([rec("a", "ok", 50, run="R"), rec("a", "pending", 100, run="S")])
    assert overlay(base, later).to_pylist()[0]["status"] == "pending"  # another run's: by time


def test_a_journal_survives_a_cut_line_and_its_next_writer_cuts_it_off(tmp_path):
    path = tmp_path / "journal.jsonl"
    Journal(path).append([rec("a", "failed"), rec("b")])
    with open(path, "ab") as f:
        f.write(b'{"id": "a", "stat')  # a kill -9 mid-append
    table, size = read_journal(path)
    assert table["id"].to_pylist() == ["a", "b"] and size == path.stat().st_size
    Journal(path).append([rec("a", "ok", 2)])
    lines = path.read_bytes().splitlines()
    assert len(lines) == 3 and all(line.endswith(b"}") for line in lines)
    assert {r["id"]: r["status"] for r in latest(read_journal(path)[0]).to_pylist()} == {
        "a": "ok", "b": "ok"}  # fmt: skip


def test_a_damaged_middle_line_is_skipped_not_fatal(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"id": "a", "status": "ok"}\n{"id": oops\n{"id": "b", "status": "ok"}\n')
    assert read_journal(path)[0]["id"].to_pylist() == ["a", "b"]


@pytest.mark.parametrize("shard", [UNSHARDED, Shard(3, 1)])
def test_compaction_folds_journals_into_the_state_and_removes_them(tmp_path, shard):
    paths = StatePaths(tmp_path)
    paths.dir.mkdir()
    Journal(paths.journal(shard.suffix)).append([rec("a"), rec("b", "failed")])
    assert state.compact(tmp_path, shard).num_rows == 2
    assert not paths.journal(shard.suffix).exists() and paths.state(shard.suffix).exists()
    Journal(paths.journal(shard.suffix)).append([rec("b", "ok", 2), rec("a", "pending", 3)])
    records = state.compact(tmp_path, shard)
    assert {r["id"]: r["status"] for r in records.to_pylist()} == {"b": "ok"}  # pending: no row
    assert state.compact(tmp_path, shard) is None  # nothing new: the state is left as it was
    assert [r["id"] for r in state.read_all(tmp_path).to_pylist()] == ["b"]


def test_a_journal_read_a_piece_at_a_time_is_the_whole_journal(tmp_path, monkeypatch):
    """Lines cut across pieces, a damaged line in one, an unfinished last line: the records are
    those of a read at once, with only the columns asked for kept."""
    from qtts.core.jobs.state import journal

    path = tmp_path / "journal.jsonl"
    Journal(path).append([rec(f"r{i}", text="é" * (i % 7)) for i in range(300)])
    with open(path, "ab") as f:
        f.write(b'{"id": oops\n{"id": "last", "status": "ok", "t": 1}\n{"id": "cut')
    whole = read_journal(path)
    monkeypatch.setattr(journal, "PIECE_BYTES", 97)  # a few lines a piece, most cut across
    pieces = read_journal(path)
    assert pieces[1] == whole[1] == path.stat().st_size
    assert pieces[0].equals(whole[0]) and whole[0].num_rows == 301
    ids, _ = read_journal(path, ("id", "t"))
    assert ids.column_names == ["id", "t"] and ids.equals(whole[0].select(["id", "t"]))


def test_a_compaction_streams_the_state_and_journal_into_row_groups(tmp_path, monkeypatch):
    """Folded a row group and a journal piece at a time, the state is what folding every
    record at once gives: each id's latest, pending ones dropped, every column kept."""
    from qtts.core.jobs.state import journal

    paths = StatePaths(tmp_path)
    paths.dir.mkdir()
    monkeypatch.setattr(state, "STATE_ROWS", 7)
    monkeypatch.setattr(journal, "PIECE_BYTES", 200)
    state.write_state(paths.state(""), to_table([rec(f"r{i}", text=f"t{i}") for i in range(40)]))
    redone = [rec(f"r{i}", "failed", 2.0, text=f"new {i}") for i in range(0, 40, 3)]
    Journal(paths.journal("")).append([*redone, rec("r5", "pending", 3.0), rec("x", t=2.0)])
    every = state.read_all(tmp_path).to_pylist()  # every record at once
    expected = {r["id"]: r for r in every if r["status"] != "pending"}
    counted = state.compact(tmp_path, UNSHARDED, ("id", "status"))
    assert sorted(counted["id"].to_pylist()) == sorted(expected) and counted.num_columns == 2
    folded = state.read_all(tmp_path)
    assert {r["id"]: r for r in folded.to_pylist()} == expected
    assert {r["id"]: r["text"] for r in folded.to_pylist()}["r3"] == "new 3"
    assert "r5" not in expected and not paths.journal("").exists()
    assert pq.ParquetFile(paths.state("")).num_row_groups > 5


def test_reading_a_subset_of_columns_conforms_old_states(tmp_path):
    paths = StatePaths(tmp_path)
    paths.dir.mkdir()
    old = pa.table({"id": ["a"], "status": ["ok"], "file": ["a.wav"]})  # an older, thinner state
    state.write_state(paths.state(""), old)
    records = state.read_own(tmp_path, UNSHARDED, ("id", "status", "settings"))
    assert records.column_names == ["id", "status", "settings"]
    assert records.to_pylist() == [{"id": "a", "status": "ok", "settings": None}]
    assert conform(old).num_columns > 20


def test_a_killed_runs_pending_records_are_read_with_a_few_columns(tmp_path):
    """A run killed after it made rows pending (a retraction, a changed fingerprint) and
    finished some: the scan reads its records without `run`, which settling them needs."""
    from qtts.core.jobs.state.records import SCAN_COLUMNS

    paths = StatePaths(tmp_path)
    paths.dir.mkdir()
    state.write_state(paths.state(""), to_table([rec(i, run="old") for i in "abc"]))
    Journal(paths.journal("")).append(
        [rec(i, "pending", 5.0, run="R") for i in "abc"] + [rec("a", "ok", 4.0, run="R")]
    )
    for columns in (SCAN_COLUMNS, ("id", "status")):
        records = state.read_own(tmp_path, UNSHARDED, columns)
        assert records.column_names == list(columns)
        got = dict(zip(records["id"].to_pylist(), records["status"].to_pylist(), strict=True))
        assert got == {"a": "ok", "b": "pending", "c": "pending"}
    every = state.read_all(tmp_path, ("id", "status"))
    assert sorted(every["status"].to_pylist()) == ["ok", "pending", "pending"]


TRICKY = ["plain", 'say "hi"', "back\\slash", "new\nline", "tab\tand\x01ctl", "日本語 ✓", "", None]


def test_json_strings_are_what_json_dumps_writes():
    got = json_strings(pa.array(TRICKY, pa.string())).to_pylist()
    assert got == [json.dumps(t, ensure_ascii=False) for t in TRICKY]
    repeated = pa.array(["vivian", "ryan", None] * 10, pa.string())  # the dictionary path
    assert json_strings(repeated).to_pylist() == [json.dumps(v) for v in repeated.to_pylist()]


def test_metadata_lines_parse_as_json():
    batch = pa.RecordBatch.from_pylist([
        {"file_name": f"{i}.wav", "id": str(i), "text": t, "speaker": "ryan", "language": None,
         "duration_s": 0.08 * i} for i, t in enumerate(TRICKY)])  # fmt: skip
    lines = "".join(json_lines(batch, METADATA_KEYS).to_pylist()).splitlines()
    assert [json.loads(x) for x in lines] == [
        {"file_name": f"{i}.wav", "id": str(i), "text": t, "speaker": "ryan", "language": None,
         "duration": 0.08 * i} for i, t in enumerate(TRICKY)]  # fmt: skip


def test_a_journal_on_a_full_disk_names_itself(tmp_path, monkeypatch):
    from qtts.core.jobs.state import journal

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal.os, "fsync", full)
    path = tmp_path / "journal.jsonl"
    with pytest.raises(OSError) as failed:
        Journal(path).append([rec("a")])
    assert failed.value.filename == str(path)


def test_one_chunk_hands_the_table_over_and_keeps_every_value():
    from qtts.core.jobs.state.records import one_chunk

    parts = [to_table([rec(f"r{i}{k}", t=float(i)) for i in range(3)]) for k in range(4)]
    table = pa.concat_tables(parts)
    want = table.to_pylist()
    held = [table]
    del table
    got = one_chunk(held)
    assert held == [] and got.to_pylist() == want
    assert got.schema == parts[0].schema and all(c.num_chunks == 1 for c in got.columns)


def test_repeated_scan_columns_are_held_encoded_with_the_same_values():
    from qtts.core.jobs.state.records import REPEATED, with_repeated_encoded

    table = to_table(
        [rec(f"r{i}", settings="abc", split="auto:60", speaker=None) for i in range(5)]
    )
    got = with_repeated_encoded(table)
    for name in REPEATED:
        assert pa.types.is_dictionary(got.schema.field(name).type)
        assert got[name].to_pylist() == table[name].to_pylist()
    assert got["id"].type == table["id"].type and with_repeated_encoded(got).equals(got)
