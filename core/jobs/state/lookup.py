"""pyarrow's index_in with its hash table built a part of the values at a time: for ten million
ids that table is about half a gigabyte, beside all a resume scan already holds; a million values
a part keeps it small, at one more pass over the keys per part. Knows Arrow arrays only."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.state.records import combined

PART = 1 << 20  # values hashed at once


def index_in(
    keys: pa.Array | pa.ChunkedArray, values: pa.Array | pa.ChunkedArray, part: int = PART
) -> pa.Array:
    """Per key, the index of its first equal in `values`, or null (as pc.index_in, in int64)."""
    keys = combined(keys)
    if len(values) <= part:
        return pc.index_in(keys, value_set=combined(values)).cast(pa.int64())
    found = pa.nulls(len(keys), pa.int64())
    for start in range(0, len(values), part):
        at = pc.index_in(keys, value_set=combined(values.slice(start, part)))
        # an earlier part's answer stands: index_in gives the first equal value
        found = pc.coalesce(found, pc.add(at.cast(pa.int64()), start))
    return found
