"""Which rows are already done, and which are to repack into this run's layout: the resume rule
(docs/job-state.md, "The fingerprint and the resume rule") over whole columns, with the reasons
rows are redone, field by field. Knows record columns; no file names, no models, no tensors."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.contract.spec import OutputOptions
from qtts.core.jobs.output.stores.presence import Held, Listing, held
from qtts.core.jobs.output.stores.registry import find
from qtts.core.jobs.state.records import INPUT_FIELDS, OK, PART, as_bools, combined, index_in
from qtts.core.jobs.work.fingerprint import format_twins, setting_changes

COMPARE_SLICE = 1 << 20  # rows compared at once: bounds the recorded columns taken into memory
# as users know them
FIELD_NAMES = {"text_digest": "text", "ref_digest": "ref_audio or voice file content"}


@dataclass
class ResumeScan:
    done: np.ndarray  # bool per valid row: nothing to synthesize (moved rows included)
    stale: pa.Array | pa.ChunkedArray  # ids that were ok but must be redone
    reasons: dict[str, int] = field(default_factory=dict)  # why stale rows are redone -> rows
    record_at: pa.Array | None = None  # per valid row: its record's index in records (or null)
    moved: np.ndarray | None = None  # bool per valid row: done, but to repack into this layout

    def __post_init__(self) -> None:
        if self.moved is None:
            self.moved = np.zeros(len(self.done), dtype=bool)

    def describe(self) -> str:
        return ", ".join(f"{why} ({n:,})" for why, n in self.reasons.items())

    def redo(self, at: np.ndarray, ids: pa.Array | pa.ChunkedArray, reasons: dict) -> ResumeScan:
        """This scan with the done rows `at` (places among `ids`, the valid rows') made stale."""
        self.done[at] = False
        self.stale = pa.concat_arrays([combined(self.stale), combined(ids.take(pa.array(at)))])
        self.reasons.update(reasons)
        return self


def aligned(rows: pa.Table, records: pa.Table) -> pa.Table:
    """records' columns for each row of `rows` (in its order; nulls where it has none)."""
    if rows.num_rows * 8 < records.num_rows:  # hash the few ids, not the many records
        records = records.filter(pc.is_in(records["id"], value_set=rows["id"].combine_chunks()))
    return records.take(index_in(rows["id"], records["id"]))


def scan(
    valid: pa.Table,
    records: pa.Table,
    listing: Listing,
    *,
    settings: str,
    output: OutputOptions,
    registry: dict,
    current: dict,
) -> ResumeScan:
    """valid: this run's valid rows (records.ROW_FIELDS); records: the shard's latest records."""
    index = index_in(valid["id"], records["id"])  # the records' ids hashed a part at a time

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

    was_ok = as_bools(pc.equal(old("status"), OK))
    same = {name: same_as_recorded(name) for name in INPUT_FIELDS}
    old_settings = old("settings")
    same_settings = as_bools(pc.equal(old_settings, settings))
    fingerprint_same = same_settings.copy()
    for mask in same.values():
        fingerprint_same &= mask
    has = _held(valid["id"], records, index, listing, output)
    done = was_ok & fingerprint_same & has.audio & has.codes
    alike = _same_but_format(old_settings, same_settings, same, registry, current)
    moved = was_ok & ~done & has.source & has.source_codes & alike
    stale = was_ok & ~done & ~moved
    reasons: dict[str, int] = {}
    if stale.any():
        for name, mask in same.items():
            if n := int((stale & ~mask).sum()):
                reasons[FIELD_NAMES.get(name, name)] = n
        changed = pc.filter(old_settings, pa.array(stale & ~same_settings & ~alike))
        for item in pc.value_counts(changed).to_pylist():
            reasons[setting_changes(registry.get(item["values"]), current)] = item["counts"]
        # the same row (in another format, maybe), but its audio is not there as recorded (in
        # whatever layout), or it is and its codes are not (a row whose audio and codes are
        # there is moved, not redone; another format alone would only have moved it)
        if n := int((stale & alike & ~has.source).sum()):
            reasons["file missing or not as recorded"] = n
        if n := int((stale & alike & has.source).sum()):
            reasons[find(output.layout).codes_missing] = n
    stale_ids = pc.filter(valid["id"], pa.array(stale))
    return ResumeScan(done | moved, stale_ids, reasons, index, moved)


def _held(
    ids: pa.Array | pa.ChunkedArray,
    records: pa.Table,
    index: pa.Array,
    listing: Listing,
    output: OutputOptions,
) -> Held:
    """presence.held over the rows, their recorded locations taken a slice at a time where the
    listing is small (an archive layout), so ten million locations are never copied at once."""
    rows = max(len(index), 1)
    step = COMPARE_SLICE if len(listing.files) <= PART else rows
    parts = []
    for start in range(0, rows, step):
        at = index.slice(start, step)
        taken = [records[name].take(at) for name in ("file", "bytes", "codes_saved")]
        parts.append(
            held(
                ids.slice(start, step),
                *taken,
                listing,
                layout=output.layout,
                audio_format=output.audio_format.value,
                save_codes=output.save_codes,
            )
        )
    return Held(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Held)))


def _same_but_format(
    old_settings: pa.Array | pa.ChunkedArray,
    same_settings: np.ndarray,
    same_inputs: dict[str, np.ndarray],
    registry: dict[str, Any],
    current: dict[str, Any],
) -> np.ndarray:
    """Per row: its inputs are this run's and its settings too, but for the audio format."""
    alike = same_settings.copy()
    twins = format_twins(registry, current)
    if twins:
        alike |= as_bools(pc.is_in(old_settings, value_set=pa.array(twins, pa.string())))
    for mask in same_inputs.values():
        alike &= mask
    return alike


def _plain(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A dictionary-encoded column (speaker, language) as its values, to compare."""
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


def _same(new: pa.Array | pa.ChunkedArray, old: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Equal, or both null."""
    both_null = pc.and_(pc.is_null(new), pc.is_null(old))
    return as_bools(pc.or_(pc.fill_null(pc.equal(new, old), False), both_null))
