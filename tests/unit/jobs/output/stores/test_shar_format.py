"""lhotse Shar shards (--output shar): lhotse itself reads what the archive store writes (cuts with
their text, voice and fields, the audio as written, codes where kept and lhotse's placeholder
where not), with ids lhotse and qtts both take as names; taking rows out keeps the three files
in step; the same rows make the same bytes; `qtts score` reads a row's member back."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pyarrow as pa
import pytest
import soundfile as sf
from store_rows import archive_store, journalled, row

from qtts.core.jobs.output.stores import retract
from qtts.core.jobs.output.stores.archive import ArchiveShard
from qtts.core.jobs.output.stores.formats import shar
from qtts.core.jobs.output.stores.member_reader import MemberReader
from qtts.core.jobs.state.journal import Journal

lhotse = pytest.importorskip("lhotse")  # the test extra

IDS = ["plain", "book1.ch2", "c%3", "d 4", "ünï#5", "end."]


def _store(out, ids, *, shard_rows=4, audio_format="wav", codes=lambda k: k % 2 == 0):
    journal = Journal(out / "j.jsonl")
    store = archive_store(out, "shar", journal, audio_format=audio_format, save_codes=True,
                          shard_rows=shard_rows)  # fmt: skip
    rows = [row(i, n=2400 + 240 * k, seed=k, codes=codes(k)) for k, i in enumerate(ids)]
    for r in rows:
        store.submit(r).result()
    store.close()
    return {r.id: r for r in rows}, pa.Table.from_pylist(journalled(journal))


def _cuts(out) -> dict:
    return {c.id: c for c in lhotse.CutSet.from_shar(in_dir=out / "data")}


def test_lhotse_reads_the_rows_back(tmp_path):
    rows, records = _store(tmp_path, IDS)
    names = sorted(p.name for p in (tmp_path / "data").iterdir())
    assert names == [f"{field}.w-{k:06d}.{ext}" for field, ext in
                     [("codes", "tar"), ("cuts", "jsonl.gz"), ("recording", "tar")]
                     for k in (0, 1)]  # fmt: skip
    assert records["file"][0].as_py() == "data/recording.w-000000.tar#plain.wav"
    cuts = _cuts(tmp_path)
    assert sorted(cuts) == sorted(IDS)
    for row_id in IDS:
        cut, made = cuts[row_id], rows[row_id]
        want = sf.read(io.BytesIO(_wav(made.audio)), dtype="float32")[0]
        np.testing.assert_array_equal(cut.load_audio()[0], want)
        assert cut.sampling_rate == 24000 and cut.duration == len(made.audio) / 24000
        assert cut.supervisions[0].text == f"text of {row_id}"
        assert cut.custom["num_frames"] is None and "duration_s" not in cut.custom
        if made.codes is not None:
            np.testing.assert_array_equal(cut.load_custom("codes"), made.codes)
        else:
            assert not cut.has_custom("codes")


def _wav(audio) -> bytes:
    from qtts.core.jobs.output.writer import encode_audio

    return encode_audio(audio, 24000, "wav")


def test_taking_rows_out_keeps_the_three_files_in_step(tmp_path):
    _, records = _store(tmp_path, IDS, shard_rows=3)
    gone = records.filter(pa.array([i in ("book1.ch2", "d 4", "ünï#5", "end.") for i in IDS]))
    retract.take_out_rows(tmp_path, gone["id"], gone["file"])
    assert sorted(_cuts(tmp_path)) == ["c%3", "plain"]
    names = sorted(p.name for p in (tmp_path / "data").iterdir())
    assert names == ["codes.w-000000.tar", "cuts.w-000000.jsonl.gz", "recording.w-000000.tar"]
    shard = ArchiveShard(shar.FORMAT, tmp_path / "data", "w-000000")
    for part, path in shard.paths():
        assert shar.keys_in(part, path) == ["plain", "c%3"]


def test_the_same_rows_make_the_same_bytes(tmp_path):
    for out in (tmp_path / "a", tmp_path / "b"):
        _store(out, IDS[:3], shard_rows=10)
    a, b = tmp_path / "a" / "data", tmp_path / "b" / "data"
    for name in ("cuts.w-000000.jsonl.gz", "codes.w-000000.tar", "recording.w-000000.tar"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    cuts = (a / "cuts.w-000000.jsonl.gz").read_bytes()
    assert cuts[4:8] == b"\0\0\0\0" and not cuts[3] & 0x08  # no time, no file name
    assert gzip.decompress(cuts).count(b"\n") == 3


def test_a_member_and_the_durations_read_back(tmp_path):
    rows, records = _store(tmp_path, IDS[:3], audio_format="flac", shard_rows=10)
    reader = MemberReader(tmp_path)
    where = dict(zip(records["id"].to_pylist(), records["file"].to_pylist(), strict=True))
    assert where["c%3"] == "data/recording.w-000000.tar#c%3.flac"
    assert reader.source(where["c%3"])().read()[:4] == b"fLaC"
    assert reader.order(pa.array([where["c%3"], where["plain"]])).tolist() == [1, 0]
    shard = ArchiveShard(shar.FORMAT, tmp_path / "data", "w-000000")
    assert shar.durations(shard) == {i: len(rows[i].audio) / 24000 for i in IDS[:3]}
