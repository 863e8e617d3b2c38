"""The stores' read side over whole columns: one listing of the out dir (names and sizes as Arrow
columns, temps apart), the locations records keep (`{id}.wav`, `data/{key part}#{member}`), which
recorded rows are present (a shard by its name, a file by its size too), and which are held for
this run or can be repacked (docs/job-state.md, "Archive shards").
Knows locations and listings; the layouts are the registry's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import FatalError
from qtts.core.jobs.output.stores.layout import Listing
from qtts.core.jobs.output.stores.registry import find, formats, layout_names
from qtts.core.jobs.output.stores.shard_files import MEMBER_SEP
from qtts.core.jobs.state.atomic_files import TEMP_MARK
from qtts.core.jobs.state.paths import ARCHIVE_DIR
from qtts.core.jobs.state.records import as_bools, index_in

BATCH = 1 << 16  # listed names per Arrow chunk


def list_out_dir(out_dir: Path, *, sizes: bool = True) -> Listing:
    """sizes=False skips a stat per file (a third of the time of a million-file folder)."""
    top = _list(out_dir, sizes=sizes, prefix="")
    shards = _list(out_dir / ARCHIVE_DIR, sizes=False, prefix=f"{ARCHIVE_DIR}/")
    files = pa.concat_tables([top.files, shards.files]) if shards.files.num_rows else top.files
    return Listing(files, top.temps, shards.temps)


def _list(out_dir: Path, *, sizes: bool, prefix: str) -> Listing:
    name_chunks: list[pa.Array] = []
    size_chunks: list[pa.Array] = []
    temps: list[str] = []
    batch_names: list[str] = []
    batch_sizes: list[int] = []
    try:
        entries = os.scandir(out_dir)
    except FileNotFoundError:
        entries = None
    if entries is not None:
        with entries:
            for entry in entries:
                name = entry.name
                if name[0] == ".":
                    if TEMP_MARK in name:
                        temps.append(name)
                    continue
                if sizes:
                    try:
                        batch_sizes.append(entry.stat(follow_symlinks=False).st_size)
                    except OSError:
                        continue
                else:
                    batch_sizes.append(None)
                batch_names.append(prefix + name if prefix else name)
                if len(batch_names) >= BATCH:
                    name_chunks.append(pa.array(batch_names, pa.string()))
                    size_chunks.append(pa.array(batch_sizes, pa.int64()))
                    batch_names, batch_sizes = [], []
    name_chunks.append(pa.array(batch_names, pa.string()))
    size_chunks.append(pa.array(batch_sizes, pa.int64()))
    files = pa.table({"name": pa.chunked_array(name_chunks), "size": pa.chunked_array(size_chunks)})
    return Listing(files, temps)


# -- locations -------------------------------------------------------------------------------------
_SHARD = rf"^{ARCHIVE_DIR}/[^{MEMBER_SEP}]*"  # "data/{shard}" up to its member


def split_location(location: str) -> tuple[str, str | None]:
    """(container relative to the out dir, member or None for a file of its own)."""
    if location.startswith(f"{ARCHIVE_DIR}/") and MEMBER_SEP in location:
        container, member = location.split(MEMBER_SEP, 1)
        return container, member
    return location, None


def containers(locations: pa.Array) -> pa.Array:
    """Each location's file relative to the out dir (the shard of a member)."""
    if not pc.any(pc.fill_null(is_archived(locations), False)).as_py():
        return locations  # files of their own: no copy of ten million names
    return pc.replace_substring_regex(locations, rf"({_SHARD}){MEMBER_SEP}.*$", r"\1")


def members(locations: pa.Array) -> pa.Array:
    """Each location's member (null for a file of its own)."""
    member = pc.replace_substring_regex(locations, f"{_SHARD}{MEMBER_SEP}", "")
    return pc.if_else(is_archived(locations), member, pa.scalar(None, pa.string()))


def is_archived(locations: pa.Array) -> pa.Array:
    """Per location: a member of a shard, not a file of its own."""
    return pc.match_substring_regex(locations, f"{_SHARD}{MEMBER_SEP}")


def layouts(locations: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """Which layout made each location (null where there is none), dictionary-encoded: one byte
    a row, not a string (ten million of them at a rerun's scan). FatalError for a location no
    layout claims (a member of a shard no format names)."""
    if isinstance(locations, pa.ChunkedArray):
        locations = locations.combine_chunks()
    kind = np.zeros(len(locations), dtype=np.int8)
    claimed = np.zeros(len(locations), dtype=bool)
    for k, fmt in enumerate(formats().values()):
        mine = fmt.claims(locations) & ~claimed
        kind[mine], claimed = k, claimed | mine
    null = as_bools(pc.is_null(locations))
    if (unknown := ~claimed & ~null).any():
        where = locations[int(np.flatnonzero(unknown)[0])].as_py()
        raise FatalError(f"a record's location {where!r} is in no output format qtts knows")
    indices = pa.array(kind, pa.int8(), mask=null)
    return pa.DictionaryArray.from_arrays(indices, pa.array(layout_names(), pa.string()))


# -- presence ------------------------------------------------------------------------------------
def present(
    locations: pa.Array | pa.ChunkedArray, sizes: pa.Array | pa.ChunkedArray, listing: Listing
) -> np.ndarray:
    """Per record: its audio is in the out dir as recorded."""
    at = index_in(containers(locations), listing.files["name"])  # names hashed a part at a time
    listed = listing.files["size"].combine_chunks()
    found = as_bools(pc.is_valid(at))
    if listed.null_count == len(listed):  # a names-only listing
        return found
    same_size = as_bools(pc.equal(listed.take(at), sizes))
    return np.where(as_bools(is_archived(locations)), found, same_size)


@dataclass
class Held:
    audio: np.ndarray  # present, in this run's layout and format
    codes: np.ndarray  # codes present too where --save-codes asks for them
    source: np.ndarray  # present as recorded, in whatever layout and format made it
    source_codes: np.ndarray  # its recorded codes present too where --save-codes asks for them


def held(
    ids: pa.Array | pa.ChunkedArray,
    locations: pa.Array | pa.ChunkedArray,
    sizes: pa.Array | pa.ChunkedArray,
    codes_saved: pa.Array | pa.ChunkedArray,
    listing: Listing,
    *,
    layout: str,
    audio_format: str,
    save_codes: bool,
) -> Held:
    fmt = find(layout)
    source = present(locations, sizes, listing)
    audio = fmt.as_written(ids, locations, audio_format) & source
    codes = source_codes = np.ones(len(audio), dtype=bool)
    if save_codes:
        saved = as_bools(codes_saved)
        codes = fmt.codes_held(ids, codes_saved, listing)
        source_codes = saved.copy()  # and where each row's own layout keeps them
        kinds = layouts(locations)
        for k in pc.unique(pc.drop_null(kinds.indices)).to_pylist():
            mine = as_bools(pc.equal(kinds.indices, k))
            own = formats()[layout_names()[k]]
            source_codes[mine] &= own.codes_held(ids, codes_saved, listing)[mine]
    return Held(audio, codes, source, source_codes)
