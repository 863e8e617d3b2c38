"""The files layout through the output seam: one atomic file per row, journalled just before it
appears, the old version's other files removed."""

from __future__ import annotations

import os

import numpy as np
import pytest
import soundfile as sf
from store_rows import journalled, row

from qtts.core.jobs.output.stores.formats import files
from qtts.core.jobs.output.stores.formats.files import FilesStore
from qtts.core.jobs.output.writer import DiskFullError
from qtts.core.jobs.state.journal import Journal


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_audio_roundtrip_16bit_with_codes(tmp_path, fmt):
    journal = Journal(tmp_path / "j.jsonl")
    store = FilesStore(tmp_path, journal, fmt, save_codes=True)
    r = row("u1", 4800, codes=True)
    r.audio[0] = 3.0  # out of range: clipped, not wrapped
    store.submit(r).result()
    store.close()
    data, sr = sf.read(tmp_path / f"u1.{fmt}", dtype="float32")
    assert sr == 24000 and sf.info(str(tmp_path / f"u1.{fmt}")).subtype == "PCM_16"
    assert np.max(np.abs(data[1:] - r.audio[1:])) < 1e-4 and data[0] > 0.99
    np.testing.assert_array_equal(np.load(tmp_path / "u1.codes.npy"), r.codes)
    size = (tmp_path / f"u1.{fmt}").stat().st_size
    assert journalled(journal) == [
        {"id": "u1", "file": f"u1.{fmt}", "bytes": size, "codes_saved": True}
    ]


def test_redone_row_drops_its_other_format_and_codes(tmp_path):
    (tmp_path / "u1.flac").write_bytes(b"old")
    (tmp_path / "u1.codes.npy").write_bytes(b"old")
    store = FilesStore(tmp_path, Journal(tmp_path / "j.jsonl"), "wav", save_codes=False)
    store.submit(row("u1")).result()
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".jsonl") == ["u1.wav"]


def test_disk_full_is_its_own_error(tmp_path, monkeypatch):
    def full(path, data, *rest):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "atomic_write_bytes", full)
    store = FilesStore(tmp_path, Journal(tmp_path / "j.jsonl"), "wav", save_codes=False)
    with pytest.raises(DiskFullError, match="disk full writing"):
        store.submit(row("u1")).result()
    store.close()
    assert not (tmp_path / "j.jsonl").exists() or journalled(Journal(tmp_path / "j.jsonl")) == []


def test_published_since_names_rows_and_seconds(tmp_path):
    store = FilesStore(tmp_path, Journal(tmp_path / "j.jsonl"), "wav", save_codes=False)
    store.submit(row("a", 4800)).result()
    store.close()
    assert store.published(["a", "b"], since=0.0) == {"a": pytest.approx(0.2)}
    assert store.published(["a"], since=os.stat(tmp_path / "a.wav").st_mtime + 5) == {}


def test_row_id_of_names_only_row_files():
    assert files.row_id_of("x.y.wav") == "x.y" and files.row_id_of("x.codes.npy") == "x"
    assert files.row_id_of("results.parquet") is None and files.row_id_of(".wav") is None
