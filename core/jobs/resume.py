"""Which rows are already done: the resume rule, over whole columns.

A row is done when its latest record is ok, its fingerprint (settings digest and every input
field) equals what this run would use, and its audio file is in the out dir with the recorded
size (and its codes file, with --save-codes). Files are checked from one listing of the out dir,
not opened one by one: writes are atomic, so a file with the recorded size is the file recorded.
Rows that were ok but are not done any more (changed fingerprint, missing or resized file) are
reported field by field, so the user reads why a rerun redoes them.
Knows record columns and file names; no models, no tensors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.fingerprint import setting_changes
from qtts.core.jobs.records import INPUT_FIELDS, OK

LIST_CHUNK = 1 << 16


@dataclass
class ResumeScan:
    done: np.ndarray  # bool per valid row
    stale: pa.Array  # ids that were ok but must be redone
    reasons: dict[str, int] = field(default_factory=dict)  # why stale rows are redone -> rows

    def describe(self) -> str:
        return ", ".join(f"{why} ({n:,})" for why, n in self.reasons.items())


def list_files(out_dir: Path) -> pa.Table:
    """name and size of every plain file in out_dir (dot files left out), in Arrow columns."""
    names: list[pa.Array] = []
    sizes: list[pa.Array] = []
    batch_names, batch_sizes = [], []
    try:
        entries = os.scandir(out_dir)
    except FileNotFoundError:
        return pa.table({"name": pa.array([], pa.string()), "size": pa.array([], pa.int64())})
    with entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                batch_sizes.append(entry.stat(follow_symlinks=False).st_size)
            except OSError:
                continue
            batch_names.append(entry.name)
            if len(batch_names) >= LIST_CHUNK:
                names.append(pa.array(batch_names, pa.string()))
                sizes.append(pa.array(batch_sizes, pa.int64()))
                batch_names, batch_sizes = [], []
    names.append(pa.array(batch_names, pa.string()))
    sizes.append(pa.array(batch_sizes, pa.int64()))
    return pa.table({"name": pa.chunked_array(names), "size": pa.chunked_array(sizes)})


def aligned(valid: pa.Table, records: pa.Table) -> pa.Table:
    """records' columns for each row of `valid` (in its order; nulls where it has none)."""
    index = pc.index_in(valid["id"], value_set=records["id"].combine_chunks())
    return records.take(index)


def scan(valid: pa.Table, records: pa.Table, listing: pa.Table, *, settings: str,
         audio_format: str, save_codes: bool, registry: dict,
         current: dict) -> ResumeScan:  # fmt: skip
    """valid: this run's valid rows (records.ROW_FIELDS); records: the shard's latest records."""
    old = aligned(valid, records)
    was_ok = _true(pc.equal(old["status"], OK))
    same = {name: _same(valid[name], old[name]) for name in INPUT_FIELDS}
    same_settings = _true(pc.equal(old["settings"], settings))
    fingerprint_same = same_settings.copy()
    for mask in same.values():
        fingerprint_same &= mask
    expected = pc.binary_join_element_wise(valid["id"], pa.scalar(audio_format), ".")
    file_ok = _true(pc.equal(old["file"], expected)) & _present(old["file"], old["bytes"], listing)
    if save_codes:
        codes = pc.binary_join_element_wise(valid["id"], pa.scalar("codes.npy"), ".")
        file_ok &= _true(pc.is_in(codes, value_set=listing["name"].combine_chunks()))
    done = was_ok & fingerprint_same & file_ok
    stale = was_ok & ~done
    reasons: dict[str, int] = {}
    if stale.any():
        for name, mask in same.items():
            if n := int((stale & ~mask).sum()):
                reasons[name.replace("ref_digest", "ref_audio content")] = n
        changed = pc.filter(old["settings"], pa.array(stale & ~same_settings))
        for item in pc.value_counts(changed).to_pylist():
            reasons[setting_changes(registry.get(item["values"]), current)] = item["counts"]
        if n := int((stale & fingerprint_same).sum()):
            reasons["file missing or not as recorded"] = n
    return ResumeScan(done, pc.filter(valid["id"], pa.array(stale)), reasons)


def _true(mask) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _same(new, old) -> np.ndarray:
    """Equal, or both null."""
    both_null = pc.and_(pc.is_null(new), pc.is_null(old))
    return _true(pc.or_(pc.fill_null(pc.equal(new, old), False), both_null))


def _present(files, sizes, listing: pa.Table) -> np.ndarray:
    """The recorded file is listed with the recorded size."""
    at = pc.index_in(files, value_set=listing["name"].combine_chunks())
    listed = listing["size"].combine_chunks().take(at)
    return _true(pc.equal(listed, sizes))
