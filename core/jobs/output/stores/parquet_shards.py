"""Parquet shards in Hugging Face's audio layout: an `audio` column of struct<bytes, path> (the
encoded WAV/FLAC and its member name), typed as the `Audio` feature in the schema's
`huggingface` metadata so `datasets.load_dataset("parquet", ...)` decodes it to arrays, beside
the sample's fields (sample_fields) and, with --save-codes, `codes` (the .npy bytes of the
int64 [frames, 16] codec codes). Rows go out in small row groups, so a shard never sits whole in
memory and a reader can take a few rows without the rest. Knows Arrow; no rows beyond their
fields.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.output.stores.sample_fields import SAMPLE_SCHEMA, sample_meta

SUFFIX = ".parquet"
ROW_GROUP_ROWS = 64  # about 30 MB of 10 s WAV clips per group
AUDIO_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
_HF_DTYPES = {
    pa.string(): "string",
    pa.large_string(): "large_string",
    pa.int64(): "int64",
    pa.float64(): "float64",
    pa.bool_(): "bool",
}


def shard_schema(sample_rate: int) -> pa.Schema:
    fields = [*SAMPLE_SCHEMA, pa.field("audio", AUDIO_TYPE), pa.field("codes", pa.binary())]
    features = {f.name: {"dtype": _HF_DTYPES[f.type], "_type": "Value"} for f in SAMPLE_SCHEMA}
    features["audio"] = {"sampling_rate": sample_rate, "_type": "Audio"}
    features["codes"] = {"dtype": "binary", "_type": "Value"}
    meta = {"huggingface": json.dumps({"info": {"features": features}})}
    return pa.schema(fields, metadata=meta)


def audio_member(row_id: str, audio_format: str) -> str:
    return row_id  # the row's id column finds it


class ParquetShardWriter:
    """Appends samples to an open Parquet file (the shard's temp file), a row group at a time."""

    def __init__(self, file: BinaryIO, sample_rate: int) -> None:
        self._schema = shard_schema(sample_rate)
        self._writer = pq.ParquetWriter(file, self._schema, compression="zstd")
        self._rows: list[dict] = []

    def add(self, row_id: str, audio: bytes, audio_format: str, codes: bytes | None, record: dict):
        self._rows.append(
            {
                **sample_meta(record),
                "audio": {"bytes": audio, "path": f"{row_id}.{audio_format}"},
                "codes": codes,
            }
        )
        if len(self._rows) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def close(self) -> None:
        self._flush()
        self._writer.close()


def keys_in(path) -> list[str]:
    return pq.read_table(path, columns=["id"])["id"].to_pylist()


def samples(path, wanted: Collection[str]) -> Iterator[tuple[str, bytes, bytes | None]]:
    """(id, audio bytes, codes bytes or None) of the shard's rows whose ids are in `wanted`, in
    shard order, a row group at a time."""
    source = pq.ParquetFile(path)
    ids = pa.array(list(wanted), pa.string())
    for group in range(source.num_row_groups):
        table = source.read_row_group(group, columns=["id", "audio", "codes"])
        table = table.filter(pc.is_in(table["id"], value_set=ids))
        yield from zip(
            table["id"].to_pylist(),
            table["audio"].combine_chunks().field("bytes").to_pylist(),
            table["codes"].to_pylist(),
            strict=True,
        )


def durations_in(path) -> dict[str, float]:
    table = pq.read_table(path, columns=["id", "duration_s"])
    return dict(zip(table["id"].to_pylist(), table["duration_s"].to_pylist(), strict=True))


def copy_without(path, file: BinaryIO, drop: Iterable[str]) -> int:
    """The shard's rows into `file`, less those of the ids in `drop`, a row group at a time;
    the rows kept."""
    drop_ids = pa.array(sorted(set(drop)), pa.string())
    source = pq.ParquetFile(path)
    kept = 0
    with pq.ParquetWriter(file, source.schema_arrow, compression="zstd") as writer:
        for group in range(source.num_row_groups):
            table = source.read_row_group(group)
            table = table.filter(pc.invert(pc.is_in(table["id"], value_set=drop_ids)))
            kept += table.num_rows
            if table.num_rows:
                writer.write_table(table)
    return kept
