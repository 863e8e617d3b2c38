"""A record's `file` is an opaque location that only the stores read: `{id}.wav` for the files
layout, `data/{shard}#{member}` for a member of an archive shard. This module is the one place
that splits a location into its container and member and says which layout made it.
Knows strings; no files.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.state.records import as_bools

ARCHIVE_DIR = "data"  # OUT/data/: every archive shard, from every writer
MEMBER_SEP = "#"  # shard names never hold it; an id may, so a member is all after the first
FILES, WEBDATASET, PARQUET = "files", "webdataset", "parquet"
SHARD_SUFFIX = {WEBDATASET: ".tar", PARQUET: ".parquet"}


def member_location(shard: str, member: str) -> str:
    return f"{ARCHIVE_DIR}/{shard}{MEMBER_SEP}{member}"


def split_location(location: str) -> tuple[str, str | None]:
    """(container relative to the out dir, member or None for a plain file)."""
    if location.startswith(f"{ARCHIVE_DIR}/") and MEMBER_SEP in location:
        container, member = location.split(MEMBER_SEP, 1)
        return container, member
    return location, None


_SHARD = rf"^{ARCHIVE_DIR}/[^{MEMBER_SEP}]*"  # "data/{shard}" up to its member


def containers(locations: pa.Array) -> pa.Array:
    """Each location's file relative to the out dir (the shard of an archive member)."""
    if not pc.any(pc.fill_null(is_archived(locations), False)).as_py():
        return locations  # plain files: no copy of ten million names
    return pc.replace_substring_regex(locations, rf"({_SHARD}){MEMBER_SEP}.*$", r"\1")


def members(locations: pa.Array) -> pa.Array:
    """Each archive location's member (null for a plain file)."""
    member = pc.replace_substring_regex(locations, f"{_SHARD}{MEMBER_SEP}", "")
    return pc.if_else(is_archived(locations), member, pa.scalar(None, pa.string()))


def is_archived(locations: pa.Array) -> pa.Array:
    return pc.match_substring_regex(locations, f"{_SHARD}{MEMBER_SEP}")


LAYOUTS = (FILES, WEBDATASET, PARQUET)


def layouts(locations) -> pa.DictionaryArray:
    """Which layout made each location (null where there is none), dictionary-encoded: one byte
    a row, not a string (ten million of them at a rerun's scan)."""
    if isinstance(locations, pa.ChunkedArray):
        locations = locations.combine_chunks()
    tar = as_bools(pc.match_substring_regex(locations, rf"{_SHARD}\.tar{MEMBER_SEP}"))
    archived = as_bools(is_archived(locations))
    kind = np.where(tar, 1, np.where(archived, 2, 0)).astype(np.int8)
    null = as_bools(pc.is_null(locations))
    indices = pa.array(kind, pa.int8(), mask=null)
    return pa.DictionaryArray.from_arrays(indices, pa.array(LAYOUTS, pa.string()))
