"""The archive formats behind one small interface, so the archive store, retraction and repacking
treat WebDataset tar shards and Parquet shards alike (a format added here is written, read back,
taken rows out of and repacked into with no other change). Knows which module writes which
format."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from qtts.core.jobs.output.stores import parquet_shards, tar_shards
from qtts.core.jobs.output.stores.locations import PARQUET, SHARD_SUFFIX, WEBDATASET


@dataclass(frozen=True)
class ShardFormat:
    layout: str
    suffix: str
    audio_member: Callable[[str, str], str]  # (id, audio format) -> its member's name
    open: Callable  # (file, sample rate) -> a writer with add(...) and close()
    keys_in: Callable  # shard path -> the ids it holds
    durations_in: Callable  # shard path -> {id: seconds}
    copy_without: Callable  # (shard path, file, ids) -> samples kept
    samples: Callable  # (shard path, ids) -> (id, audio bytes, codes bytes | None) in shard order


FORMATS = {
    WEBDATASET: ShardFormat(
        WEBDATASET,
        SHARD_SUFFIX[WEBDATASET],
        tar_shards.audio_member,
        lambda file, sample_rate: tar_shards.TarShardWriter(file),
        tar_shards.keys_in,
        tar_shards.durations_in,
        tar_shards.copy_without,
        tar_shards.samples,
    ),
    PARQUET: ShardFormat(
        PARQUET,
        SHARD_SUFFIX[PARQUET],
        parquet_shards.audio_member,
        parquet_shards.ParquetShardWriter,
        parquet_shards.keys_in,
        parquet_shards.durations_in,
        parquet_shards.copy_without,
        parquet_shards.samples,
    ),
}


def format_of(shard_name: str) -> ShardFormat | None:
    for fmt in FORMATS.values():
        if shard_name.endswith(fmt.suffix):
            return fmt
    return None
