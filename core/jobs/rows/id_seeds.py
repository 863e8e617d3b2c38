"""The seed a row draws with when neither its `seed` column nor --seed gives one: a hash of its
id, so rows of the same text and voice make different audio (a dataset that does not repeat
itself), and a row draws the same on every machine, Python and run. The rule: the first 4 bytes
of blake2b(id as UTF-8, digest_size=4), big-endian, shifted right by one: [0, 2**31). Which rule
an out dir's rows follow is pinned in its job file (core/jobs/state/jobfile.py: an out dir of a
qtts from before keeps seed 0). Knows ids; no models, no files."""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import pyarrow as pa

CHUNK = 65_536  # ids turned into Python strings at once: memory bounded at millions of rows
NULL = bytes(4)  # a null id's "digest": seed 0


def id_seed(row_id: str) -> int:
    """The seed of the row `row_id`, in [0, 2**31)."""
    digest = hashlib.blake2b(row_id.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") >> 1


def id_seeds(ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """id_seed of each id, int64; 0 for a null id (its row fails validation anyway). The
    digests of a chunk are read as big-endian words at once: about 1 s per million ids."""
    seeds = np.zeros(len(ids), dtype=np.int64)
    hashed = functools.partial(hashlib.blake2b, digest_size=4)
    for start in range(0, len(ids), CHUNK):
        chunk = ids.slice(start, CHUNK).to_pylist()
        digests = b"".join(NULL if i is None else hashed(i.encode("utf-8")).digest() for i in chunk)
        seeds[start : start + len(chunk)] = np.frombuffer(digests, dtype=">u4") >> 1
    return pa.array(seeds)
