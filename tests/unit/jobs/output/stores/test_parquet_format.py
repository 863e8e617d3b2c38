"""Parquet shards in Hugging Face's audio layout: `datasets` (before 4.0, which decodes with
soundfile) loads them and decodes the audio to 24 kHz arrays."""

from __future__ import annotations

import io

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf

from qtts.core.jobs.output.stores.formats import parquet
from qtts.core.jobs.output.stores.formats.parquet import ParquetShardWriter


def _wav(values) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.asarray(values, np.float32), 24000, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def _shard(path, ids):
    with open(path, "wb") as f:
        w = ParquetShardWriter(f, 24000)
        for i, row_id in enumerate(ids):
            record = {"id": row_id, "text": f"t{i}", "duration_s": 0.01 * (i + 1)}
            w.add(row_id, _wav([0.1] * 240 * (i + 1)), "wav", None, record)
        w.close()


def test_datasets_decodes_the_audio_column(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "data").mkdir()
    ids = [f"r{i}" for i in range(parquet.ROW_GROUP_ROWS + 3)]  # two row groups
    _shard(tmp_path / "data" / "s-000000.parquet", ids)
    ds = datasets.load_dataset(
        "parquet", data_dir=str(tmp_path / "data"), split="train", cache_dir=str(tmp_path / "cache")
    )
    assert ds["id"] == ids
    audio = ds[2]["audio"]
    assert audio["sampling_rate"] == 24000 and audio["array"].shape == (720,)
    assert np.allclose(audio["array"], 0.1, atol=1e-4)


def test_copy_without_keeps_schema_and_order(tmp_path):
    _shard(tmp_path / "a.parquet", ["a", "b", "c"])
    with open(tmp_path / "b.parquet", "wb") as f:
        kept = parquet.copy_without(parquet.SHARD, tmp_path / "a.parquet", f, {"b"})
    assert kept == 2 and parquet.keys_in(parquet.SHARD, tmp_path / "b.parquet") == ["a", "c"]
    assert pq.read_schema(tmp_path / "b.parquet") == pq.read_schema(tmp_path / "a.parquet")
    assert b"huggingface" in pq.read_schema(tmp_path / "b.parquet").metadata
