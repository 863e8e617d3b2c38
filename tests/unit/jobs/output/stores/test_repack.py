"""The repack's parts: every registered archive format reads its samples back for a repack; a
commit's intent is carried out once whatever step a kill cut it at (temps named, records
journalled, old copies removed, nothing twice); audio changes format losslessly, once checked
against its record."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from store_rows import tone

from qtts.core.jobs.output.stores import repack_commit
from qtts.core.jobs.output.stores.archive import ArchiveFormat, ArchiveShard
from qtts.core.jobs.output.stores.layout import repack_temp
from qtts.core.jobs.output.stores.open_store import StoreSpec
from qtts.core.jobs.output.stores.registry import find, formats
from qtts.core.jobs.output.stores.repack import audio_format_of, check_whole, in_format
from qtts.core.jobs.output.stores.repack_commit import INTENT_SCHEMA
from qtts.core.jobs.output.stores.shard_files import ShardFiles
from qtts.core.jobs.output.writer import encode_audio, encode_codes
from qtts.core.jobs.state.atomic_files import temp_path
from qtts.core.jobs.state.journal import Journal, read_journals
from qtts.core.jobs.state.paths import StatePaths

SR = 24000


def wav(seed: int) -> bytes:
    return encode_audio(tone(2400, seed), SR, "wav")


def record(row_id: str, old_file: str) -> dict:
    return {"id": row_id, "status": "ok", "file": old_file, "bytes": 1, "sample_rate": SR,
            "text": f"text of {row_id}", "settings": "s", "run": "R", "t": 2.0}  # fmt: skip


def codes_npy(i: int) -> bytes:
    return encode_codes(np.full((2, 16), i, dtype=np.int64))


ARCHIVES = sorted(name for name, fmt in formats().items() if isinstance(fmt, ArchiveFormat))


@pytest.mark.parametrize("layout", ARCHIVES)
def test_every_format_reads_back_the_samples_a_repack_asks_for(tmp_path, layout):
    shard = ArchiveShard(find(layout), tmp_path, "s")
    files = ShardFiles(shard, temp_path, exclusive=True)
    ids = ["a", "b.1", "c%2", "d"]
    writer = shard.fmt.writer(files.open, SR)
    for i, row_id in enumerate(ids):
        codes = codes_npy(i) if i % 2 == 0 else None
        writer.add(row_id, wav(i), "wav", codes, record(row_id, ""))
    writer.close()
    files.close()
    files.publish()
    got = list(shard.fmt.samples(shard, {"d", "b.1", "a", "zz"}))
    assert [g[0] for g in got] == ["a", "b.1", "d"]  # shard order; an id it lacks is skipped
    assert [g[1] for g in got] == [wav(0), wav(1), wav(3)]
    assert [g[2] for g in got] == [codes_npy(0), None, None]


def _files_out(tmp_path, n=3):
    """An out dir of n plain WAV files (the files layout), its journal, and their bytes."""
    (tmp_path / ".qtts").mkdir()
    data = {}
    for i in range(n):
        data[f"r{i}"] = wav(i)
        (tmp_path / f"r{i}.wav").write_bytes(data[f"r{i}"])
    return Journal(StatePaths(tmp_path).journal("")), data


def _sealed_batch(tmp_path, data, layout="webdataset") -> pa.Table:
    """A batch written into its temp outputs and sealed, not yet committed."""
    spec = StoreSpec(layout=layout, shard_rows=10)
    target = spec.fmt.repack_target(tmp_path, spec, "run")
    for row_id, audio in data.items():
        target.add(record(row_id, f"{row_id}.wav"), audio, None, f"{row_id}.wav")
    return pa.Table.from_pylist(target.seal(), schema=INTENT_SCHEMA)


def _journalled(journal) -> list[str]:
    table, _ = read_journals([journal.path])
    return table["id"].to_pylist()


def test_a_commit_names_and_journals_and_the_old_copies_go_after(tmp_path):
    journal, data = _files_out(tmp_path)
    rows = _sealed_batch(tmp_path, data)
    shard = tmp_path / "data" / "run-repack-000000.tar"
    assert repack_temp(shard).exists() and not shard.exists()
    intent, moved = repack_commit.commit(tmp_path, "", journal, rows, 0)
    assert intent == StatePaths(tmp_path).repack_intent("", 0) and intent.exists()
    assert moved.num_rows == 3 and shard.exists() and not repack_temp(shard).exists()
    assert _journalled(journal) == ["r0", "r1", "r2"]
    assert len(list(tmp_path.glob("*.wav"))) == 3  # the old copies stay until taken out
    repack_commit.take_out(tmp_path, moved)
    repack_commit.retire([intent])
    assert list(tmp_path.glob("*.wav")) == [] and not intent.exists()
    webdataset = find("webdataset")
    assert webdataset.keys_in(webdataset.key, shard) == ["r0", "r1", "r2"]


@pytest.mark.parametrize("cut", ["before naming", "after naming", "half removed"])
def test_a_killed_commit_is_finished_once_by_the_next_run(tmp_path, cut):
    journal, data = _files_out(tmp_path)
    rows = _sealed_batch(tmp_path, data)
    pq.write_table(rows, StatePaths(tmp_path).repack_intent("", 0))  # the commit point, a kill
    shard = tmp_path / "data" / "run-repack-000000.tar"
    if cut != "before naming":
        repack_temp(shard).rename(shard)
    if cut == "half removed":
        journal.append(rows.select(INTENT_SCHEMA.names[:-1]).slice(0, 3).to_pylist())
        (tmp_path / "r0.wav").unlink()
    for _ in range(2):  # the next run finishes it; a later one finds nothing to do
        repack_commit.finish(tmp_path, "", journal)
    assert shard.exists() and list(tmp_path.glob("*.wav")) == []
    assert sorted(set(_journalled(journal))) == ["r0", "r1", "r2"]
    assert StatePaths(tmp_path).repack_intents("") == []


def test_rows_whose_new_output_is_gone_stay_where_they_were(tmp_path, caplog):
    journal, data = _files_out(tmp_path)
    rows = _sealed_batch(tmp_path, data, layout="parquet")
    pq.write_table(rows, StatePaths(tmp_path).repack_intent("", 0))
    repack_temp(tmp_path / "data" / "run-repack-000000.parquet").unlink()  # by hand
    assert repack_commit.finish(tmp_path, "", journal) == 0
    assert len(list(tmp_path.glob("*.wav"))) == 3 and _journalled(journal) == []
    assert "kept where they were" in caplog.text


def test_a_damaged_intent_is_one_line_naming_it_and_what_to_do(tmp_path):
    from qtts.core.errors import FatalError

    journal, _ = _files_out(tmp_path)
    StatePaths(tmp_path).repack_intent("", 0).write_bytes(b"not parquet")
    with pytest.raises(FatalError, match=r"repack intent .*repack\.000000\.parquet is unr") as e:
        repack_commit.finish(tmp_path, "", journal)
    assert "restore it" in str(e.value) and "remove it to" not in str(e.value)
    assert len(list(tmp_path.glob("*.wav"))) == 3


def test_files_written_from_a_shard_keep_their_codes(tmp_path):
    (tmp_path / ".qtts").mkdir()
    journal = Journal(StatePaths(tmp_path).journal(""))
    spec = StoreSpec(layout="files", save_codes=True)
    target = spec.fmt.repack_target(tmp_path, spec, "run")
    target.add(record("a", "data/x.tar#a.wav"), wav(0), b"codes", "data/x.tar#a.wav")
    rows = pa.Table.from_pylist(target.seal(), schema=INTENT_SCHEMA)
    _, moved = repack_commit.commit(tmp_path, "", journal, rows, 0)
    assert moved.num_rows == 1
    repack_commit.take_out(tmp_path, moved)
    assert (tmp_path / "a.wav").read_bytes() == wav(0)
    assert (tmp_path / "a.codes.npy").read_bytes() == b"codes"


def test_a_format_change_keeps_every_sample():
    data = wav(3)
    flac = in_format(data, "flac")
    assert audio_format_of(flac) == "flac" and in_format(data, "wav") is data
    pcm = sf.read(io.BytesIO(data), dtype="int16")[0]
    np.testing.assert_array_equal(sf.read(io.BytesIO(flac), dtype="int16")[0], pcm)
    np.testing.assert_array_equal(sf.read(io.BytesIO(in_format(flac, "wav")), dtype="int16")[0],
                                  pcm)  # fmt: skip


def test_audio_is_checked_against_its_record_before_it_is_packed():
    """A cut-short WAV still reads as audio (its header's count shrinks to the samples there); a
    cut-short FLAC still says every sample: the recorded size and sample count tell both apart."""
    data = wav(4)
    samples = sf.info(io.BytesIO(data)).frames
    check_whole(data, nbytes=len(data), samples=samples)
    check_whole(data, nbytes=None, samples=None)  # a record without them: the header alone
    half = data[: len(data) // 2]
    with pytest.raises(ValueError, match="bytes where"):
        check_whole(half, nbytes=len(data), samples=samples)
    with pytest.raises(ValueError, match="samples where"):
        check_whole(half, nbytes=None, samples=samples)
    flac = in_format(data, "flac")
    with pytest.raises(ValueError, match="bytes where"):
        check_whole(flac[: len(flac) // 2], nbytes=len(flac), samples=samples)
    with pytest.raises(RuntimeError):  # no audio header at all
        check_whole(b"RIFF" + bytes(len(data) - 4), nbytes=len(data), samples=samples)
