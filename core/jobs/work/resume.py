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

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.state.listing import Listing
from qtts.core.jobs.state.records import INPUT_FIELDS, OK
from qtts.core.jobs.work.fingerprint import setting_changes

COMPARE_SLICE = 1 << 20  # rows compared at once: bounds the recorded columns taken into memory
FIELD_NAMES = {"text_digest": "text", "ref_digest": "ref_audio content"}  # as users know them
CODES_SUFFIX = "codes.npy"  # --save-codes: {id}.codes.npy beside the audio


@dataclass
class ResumeScan:
    done: np.ndarray  # bool per valid row
    stale: pa.Array  # ids that were ok but must be redone
    reasons: dict[str, int] = field(default_factory=dict)  # why stale rows are redone -> rows
    record_at: pa.Array | None = None  # per valid row: its record's index in records (or null)

    def describe(self) -> str:
        return ", ".join(f"{why} ({n:,})" for why, n in self.reasons.items())


def aligned(rows: pa.Table, records: pa.Table) -> pa.Table:
    """records' columns for each row of `rows` (in its order; nulls where it has none)."""
    if rows.num_rows * 8 < records.num_rows:  # hash the few ids, not the many records
        records = records.filter(pc.is_in(records["id"], value_set=rows["id"].combine_chunks()))
    index = pc.index_in(rows["id"], value_set=records["id"].combine_chunks())
    return records.take(index)


def scan(
    valid: pa.Table,
    records: pa.Table,
    listing: Listing,
    *,
    settings: str,
    audio_format: str,
    save_codes: bool,
    registry: dict,
    current: dict,
) -> ResumeScan:
    """valid: this run's valid rows (records.ROW_FIELDS); records: the shard's latest records."""
    index = pc.index_in(valid["id"], value_set=records["id"].combine_chunks())

    def old(name: str) -> pa.Array:  # one recorded column at a time, in valid's order
        return records[name].take(index)

    def same_as_recorded(name: str) -> np.ndarray:  # a slice at a time: text is the bulk
        return np.concatenate(
            [
                _same(
                    _plain(valid[name].slice(start, COMPARE_SLICE)),
                    records[name].take(index.slice(start, COMPARE_SLICE)),
                )
                for start in range(0, max(len(index), 1), COMPARE_SLICE)
            ]
        )

    was_ok = _true(pc.equal(old("status"), OK))
    same = {name: same_as_recorded(name) for name in INPUT_FIELDS}
    old_settings = old("settings")
    same_settings = _true(pc.equal(old_settings, settings))
    fingerprint_same = same_settings.copy()
    for mask in same.values():
        fingerprint_same &= mask
    expected = pc.binary_join_element_wise(valid["id"], pa.scalar(audio_format), ".")
    old_file = old("file")
    audio_ok = _true(pc.equal(old_file, expected)) & present(old_file, old("bytes"), listing)
    codes_ok = np.ones(len(audio_ok), dtype=bool)
    if save_codes:
        codes = pc.binary_join_element_wise(valid["id"], pa.scalar(CODES_SUFFIX), ".")
        codes_ok = _true(pc.is_in(codes, value_set=listing.names()))
    done = was_ok & fingerprint_same & audio_ok & codes_ok
    stale = was_ok & ~done
    reasons: dict[str, int] = {}
    if stale.any():
        for name, mask in same.items():
            if n := int((stale & ~mask).sum()):
                reasons[FIELD_NAMES.get(name, name)] = n
        changed = pc.filter(old_settings, pa.array(stale & ~same_settings))
        for item in pc.value_counts(changed).to_pylist():
            reasons[setting_changes(registry.get(item["values"]), current)] = item["counts"]
        if n := int((stale & fingerprint_same & ~audio_ok).sum()):
            reasons["file missing or not as recorded"] = n
        if n := int((stale & fingerprint_same & audio_ok & ~codes_ok).sum()):
            reasons[f"codes file missing (--save-codes writes {{id}}.{CODES_SUFFIX})"] = n
    return ResumeScan(done, pc.filter(valid["id"], pa.array(stale)), reasons, index)


def _plain(column):
    """A dictionary-encoded column (speaker, language) as its values, to compare."""
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


def _true(mask) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _same(new, old) -> np.ndarray:
    """Equal, or both null."""
    both_null = pc.and_(pc.is_null(new), pc.is_null(old))
    return _true(pc.or_(pc.fill_null(pc.equal(new, old), False), both_null))


def present(files, sizes, listing: Listing) -> np.ndarray:
    """The recorded file is listed (with the recorded size, when the listing has sizes)."""
    at = pc.index_in(files, value_set=listing.names())
    listed = listing.files["size"].combine_chunks()
    if listed.null_count == len(listed):  # a names-only listing
        return _true(pc.is_valid(at))
    return _true(pc.equal(listed.take(at), sizes))
