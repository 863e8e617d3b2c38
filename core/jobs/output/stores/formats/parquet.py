"""--output parquet: Parquet shards `{shard}.parquet` in Hugging Face's audio layout (an `audio`
struct<bytes, path> typed as the `Audio` feature in the schema's `huggingface` metadata) beside the
sample fields and, with --save-codes, `codes` (.npy bytes), in row groups of ROW_GROUP_ROWS.
pyarrow is imported inside the functions (`qtts --help` reads FORMAT). Knows Arrow; no rows.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import BinaryIO

from qtts.core.jobs.output.stores.archive import (
    ArchiveFormat,
    ArchiveShard,
    HubLoad,
    KeptBlocks,
    Part,
)

SHARD = Part("", ".parquet")
ROW_GROUP_ROWS = 64  # about 30 MB of 10 s WAV clips per group


def shard_schema(sample_rate: int):
    import pyarrow as pa

    from qtts.core.jobs.output.recorder import SAMPLE_SCHEMA

    dtypes = {pa.string(): "string", pa.large_string(): "large_string", pa.int64(): "int64",
              pa.float64(): "float64", pa.bool_(): "bool"}  # fmt: skip
    audio_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    fields = [*SAMPLE_SCHEMA, pa.field("audio", audio_type), pa.field("codes", pa.binary())]
    features = {f.name: {"dtype": dtypes[f.type], "_type": "Value"} for f in SAMPLE_SCHEMA}
    features["audio"] = {"sampling_rate": sample_rate, "_type": "Audio"}
    features["codes"] = {"dtype": "binary", "_type": "Value"}
    meta = {"huggingface": json.dumps({"info": {"features": features}})}
    return pa.schema(fields, metadata=meta)


def audio_member(row_id: str, audio_format: str) -> str:
    return row_id  # the row's id column finds it


class ParquetShardWriter:
    """Appends samples to an open Parquet file (the shard's temp file), a row group at a time."""

    def __init__(self, file: BinaryIO, sample_rate: int) -> None:
        import pyarrow.parquet as pq

        self._schema = shard_schema(sample_rate)
        self._writer = pq.ParquetWriter(file, self._schema, compression="zstd")
        self._rows: list[dict] = []

    def add(self, row_id: str, audio: bytes, audio_format: str, codes: bytes | None, record: dict):
        from qtts.core.jobs.output.recorder import sample_meta

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
        import pyarrow as pa

        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def close(self) -> None:
        self._flush()
        self._writer.close()


def keys_in(part: Part, path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["id"])["id"].to_pylist()


def samples(
    shard: ArchiveShard, wanted: Collection[str]
) -> Iterator[tuple[str, bytes, bytes | None]]:
    """(id, audio bytes, codes bytes or None) of the shard's rows whose ids are in `wanted`, in
    shard order, a row group at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    source = pq.ParquetFile(shard.key_path)
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


def durations(shard: ArchiveShard) -> dict[str, float]:
    import pyarrow.parquet as pq

    table = pq.read_table(shard.key_path, columns=["id", "duration_s"])
    return dict(zip(table["id"].to_pylist(), table["duration_s"].to_pylist(), strict=True))


def copy_without(part: Part, path: Path, file: BinaryIO, drop: set[str]) -> int:
    """The shard's rows into `file`, less those of the ids in `drop`, a row group at a time;
    the rows kept."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    drop_ids = pa.array(sorted(drop), pa.string())
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


class ParquetMembers:
    """A shard's rows by id (row group, row); audio read a row group at a time (MemberSource)."""

    def __init__(self, path: Path, kept: KeptBlocks) -> None:
        import pyarrow.parquet as pq

        self.path, self.kept = path, kept
        st = path.stat()
        self.stamp = (path, st.st_size, st.st_mtime_ns)  # a shard rewritten is indexed anew
        source = pq.ParquetFile(path)
        self.index: dict[str, tuple[int, int]] = {}
        for g in range(source.num_row_groups):
            ids = source.read_row_group(g, columns=["id"])["id"].to_pylist()
            self.index.update((row_id, (g, k)) for k, row_id in enumerate(ids))

    def position(self, member: str) -> tuple[int, int]:
        return self.index.get(member, (0, 0))

    def read(self, member: str) -> bytes:
        group, row = self.index[member]
        return self.kept.get((*self.stamp, group), lambda: self._group(group))[row]["bytes"]

    def _group(self, group: int) -> list:
        import pyarrow.parquet as pq

        table = pq.ParquetFile(self.path).read_row_group(group, columns=["audio"])
        return table["audio"].to_pylist()


def _read_errors() -> tuple[type[BaseException], ...]:
    import pyarrow as pa

    return (pa.ArrowException,)


def hub_features(shard: Path) -> list[dict]:
    """The shard's own Hugging Face features (its schema's metadata), as a dataset card lists
    them."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(shard)
    features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    out = []
    for name in schema.names:
        f = features[name]
        if f.get("_type") == "Audio":
            out.append({"name": name, "dtype": {"audio": {"sampling_rate": f["sampling_rate"]}}})
        else:
            out.append({"name": name, "dtype": f.get("dtype", "string")})
    return out


FORMAT = ArchiveFormat(
    name="parquet",
    help="Parquet shards in OUT/data/ with a Hugging Face Audio column",
    parts=(SHARD,),
    member=audio_member,
    writer=lambda open_part, sample_rate: ParquetShardWriter(open_part(SHARD), sample_rate),
    keys_in=keys_in,
    copy_without=copy_without,
    samples=samples,
    durations=durations,
    open_members=ParquetMembers,
    read_errors=_read_errors,
    hub=HubLoad("data/*.parquet", features=hub_features, filters_ids=True),
    reads_back=(
        "import glob, pyarrow.dataset as pads",
        "",
        "# every ok row, read lazily (results.parquet's `kept` says which rows pass the rules)",
        'shards = pads.dataset(sorted(glob.glob({data} + "/*.parquet")))',
    ),
)
