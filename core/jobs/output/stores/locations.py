"""A record's `file` is an opaque location that only the stores read: `{id}.wav` for the files
layout, `data/{key part}#{member}` for a member of an archive shard (the key part: its shard's
file a location names, shard_format.py). This module is the one place that splits a location
into its container and member and says which layout made it (by the registry's formats: a
member location that no format's key part could name is an error, never a default).
Knows strings; no files.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import FatalError
from qtts.core.jobs.output.stores.registry import FILES as FILES  # the seam's modules' name
from qtts.core.jobs.output.stores.registry import archive_formats, layout_names
from qtts.core.jobs.state.paths import ARCHIVE_DIR as ARCHIVE_DIR  # the stores' name for it
from qtts.core.jobs.state.records import as_bools

MEMBER_SEP = "#"  # shard names never hold it; an id may, so a member is all after the first


def member_location(key_part: str, member: str) -> str:
    """key_part: the file name of the shard's key part."""
    return f"{ARCHIVE_DIR}/{key_part}{MEMBER_SEP}{member}"


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


def layouts(locations: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """Which layout made each location (null where there is none), dictionary-encoded: one byte
    a row, not a string (ten million of them at a rerun's scan). FatalError for a member of a
    shard no format names."""
    if isinstance(locations, pa.ChunkedArray):
        locations = locations.combine_chunks()
    names = layout_names()
    kind = np.zeros(len(locations), dtype=np.int8)  # FILES
    archived = as_bools(is_archived(locations))
    if archived.any():
        claimed = np.zeros(len(locations), dtype=bool)
        for k, fmt in enumerate(archive_formats().values(), start=1):
            key = rf"^{ARCHIVE_DIR}/{fmt.key.regex()}{MEMBER_SEP}"
            mine = as_bools(pc.match_substring_regex(locations, key))
            kind[mine], claimed = k, claimed | mine
        if (unknown := archived & ~claimed).any():
            where = locations[int(np.flatnonzero(unknown)[0])].as_py()
            raise FatalError(f"a record's location {where!r} is in no output format qtts knows")
    null = as_bools(pc.is_null(locations))
    indices = pa.array(kind, pa.int8(), mask=null)
    return pa.DictionaryArray.from_arrays(indices, pa.array(names, pa.string()))
