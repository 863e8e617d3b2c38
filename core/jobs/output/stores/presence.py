"""The stores' read side: which recorded rows are durably present, over whole columns.

A plain file is present when the listing has it with the recorded size (writes are atomic, so
that is the file recorded); an archive member when its shard is listed in OUT/data/ (a shard
gets its name only once it is whole and every row in it journalled, and a shard rewritten
without some rows is replaced atomically after those rows' records were made pending:
retract.py). A row is held for this run when it is present in this run's layout, as this run
would write it (its codes too, with --save-codes); where it is present as recorded in another
layout or format, it can be repacked instead of made again (repack.py).
Knows locations and listings; no formats, no records beyond their columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.output.stores.files import CODES_SUFFIX
from qtts.core.jobs.output.stores.listing import Listing
from qtts.core.jobs.output.stores.locations import FILES, containers, is_archived, layouts
from qtts.core.jobs.state.lookup import index_in
from qtts.core.jobs.state.records import as_bools


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


SLICE = 1 << 20  # rows whose expected names are built at once


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
    if layout == FILES:  # {id}.{format}, built a slice at a time: not ten million names at once
        suffix = pa.scalar(audio_format)
        as_written = np.concatenate(
            [
                as_bools(
                    pc.equal(
                        locations.slice(start, SLICE),
                        pc.binary_join_element_wise(ids.slice(start, SLICE), suffix, "."),
                    )
                )
                for start in range(0, max(len(ids), 1), SLICE)
            ]
        )[: len(ids)]
    else:
        as_written = as_bools(pc.equal(layouts(locations), layout))
    source = present(locations, sizes, listing)
    audio = as_written & source
    codes = source_codes = np.ones(len(audio), dtype=bool)
    if save_codes:
        saved, archived = as_bools(codes_saved), as_bools(is_archived(locations))
        listed = np.zeros(len(audio), dtype=bool)  # {id}.codes.npy, where a plain file's are
        if layout == FILES or (saved & ~archived).any():
            names = pc.binary_join_element_wise(ids, pa.scalar(CODES_SUFFIX), "")
            listed = as_bools(pc.is_in(names, value_set=listing.names()))
        codes = listed if layout == FILES else saved
        source_codes = saved & (archived | listed)
    return Held(audio, codes, source, source_codes)
