"""Which recorded rows are present: files by listed size, archive members by their shard."""

from __future__ import annotations

import pyarrow as pa

from qtts.core.jobs.output.stores.presence import held, list_out_dir, present


def test_files_need_their_size_and_members_their_shard(tmp_path):
    (tmp_path / "a.wav").write_bytes(b"1234")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "w-000000.tar").write_bytes(b"tar")
    (tmp_path / "data" / ".w-000001.tar.qtts-tmp-1-1").write_bytes(b"open")
    listing = list_out_dir(tmp_path)
    locations = pa.array(
        ["a.wav", "a.wav", "data/w-000000.tar#a.wav", "data/w-000001.tar#b.wav", "b.wav"]
    )
    sizes = pa.array([4, 5, 999, 1, 4])
    assert present(locations, sizes, listing).tolist() == [True, False, True, False, False]
    assert listing.archive_temps == [".w-000001.tar.qtts-tmp-1-1"]


def test_held_asks_for_this_runs_layout_and_codes(tmp_path):
    (tmp_path / "a.wav").write_bytes(b"1234")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "w-000000.tar").write_bytes(b"tar")
    listing = list_out_dir(tmp_path)
    ids = pa.array(["a", "b"])
    locations = pa.array(["a.wav", "data/w-000000.tar#b.wav"])
    sizes, codes = pa.array([4, 10]), pa.array([None, False], pa.bool_())
    kw = dict(audio_format="wav", save_codes=False)
    as_files = held(ids, locations, sizes, codes, listing, layout="files", **kw)
    assert as_files.audio.tolist() == [True, False] and as_files.source.tolist() == [True, True]
    as_tar = held(ids, locations, sizes, codes, listing, layout="webdataset", **kw)
    assert as_tar.audio.tolist() == [False, True]
    with_codes = held(
        ids,
        locations,
        sizes,
        codes,
        listing,
        layout="webdataset",
        audio_format="wav",
        save_codes=True,
    )
    assert with_codes.codes.tolist() == [False, False]
