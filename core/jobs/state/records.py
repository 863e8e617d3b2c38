"""A row's outcome as the job records it: one schema for journal lines, shard state and results
(docs/job-state.md, "Records"), the merge of record tables (the newest record of an id wins), and
index_in: where each id sits among the records, hashed a part at a time.
Knows columns; no files, no models."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

RECORD_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("row", pa.int64()),  # the input row it came from, when it was recorded
        ("status", pa.string()),  # ok | failed | pending (not done after all)
        ("error", pa.string()),
        ("file", pa.string()),  # where its audio is: a layout's opaque location (stores/presence)
        ("bytes", pa.int64()),  # the audio's size: resume checks a file's without opening it
        ("codes_saved", pa.bool_()),  # its codes were saved beside it (--save-codes)
        ("num_frames", pa.int64()),
        ("num_samples", pa.int64()),
        ("sample_rate", pa.int64()),
        ("duration_s", pa.float64()),
        ("hit_frame_budget", pa.bool_()),
        ("segments", pa.int64()),  # segments the row was synthesized in (1: whole)
        ("segment_frames", pa.list_(pa.int64())),  # frames of each, for a split row (else null)
        ("text_tokens", pa.int64()),  # the text's tokens: whether other split settings cut it
        ("attempts", pa.int64()),  # tries it took (--on-budget retry); split: its segments' most
        ("kept_seed", pa.int64()),  # the seed that drew its kept codes (a whole row)
        ("segment_seeds", pa.list_(pa.int64())),  # a split row: each segment's kept seed
        # model-free measures of an ok row (qtts.core.jobs.output.recorder.MEASURES)
        ("peak", pa.float64()),
        ("rms_dbfs", pa.float64()),
        ("silence_ratio", pa.float64()),
        ("repeat_ratio", pa.float64()),
        ("chars_per_s", pa.float64()),
        ("segment_chars_per_s", pa.list_(pa.float64())),  # a split row: each segment's, apiece
        # --loudness: the clip's integrated loudness as written (null: silent, or not asked) and
        # what normalizing it did (qtts.core.jobs.output.finishing: normalized, peak_limited,
        # silent)
        ("loudness_lufs", pa.float64()),
        ("loudness_status", pa.string()),
        ("text", pa.large_string()),  # a dataset's texts pass 2 GiB: 64-bit offsets
        ("text_digest", pa.int64()),  # of the text: resume compares it, not the text
        ("speaker", pa.string()),
        ("language", pa.string()),
        ("instruct", pa.string()),
        ("seed", pa.int64()),
        ("ref_audio", pa.string()),
        ("ref_text", pa.string()),
        ("ref_digest", pa.string()),  # content of the reference audio or voice file (Base)
        ("voice", pa.string()),  # the voice file it cloned (Base; ref_audio is then null)
        ("settings", pa.string()),  # digest of the job settings (fingerprint.JobFingerprint)
        ("split", pa.string()),  # the split settings it ran under (spec.SplitOptions.key)
        ("on_budget", pa.string()),  # the budget policy it ran under (spec.FailurePolicy.key)
        ("model", pa.string()),  # the --model string, for people reading results
        ("run", pa.string()),
        ("t", pa.float64()),  # wall-clock time recorded: orders records across journals
    ]
)
# Row inputs that, with `settings`, make the row's fingerprint (the text by its digest).
INPUT_FIELDS = ("text_digest", "speaker", "language", "instruct", "seed", "ref_digest", "ref_text")
ROW_FIELDS = ("id", "row", "text", *INPUT_FIELDS, "ref_audio", "voice")  # its record's inputs
OK, FAILED, PENDING = "ok", "failed", "pending"


def failed_record(
    row: dict[str, Any], error: str, attempts: int | None = None, **run: Any
) -> dict[str, Any]:
    """row: ROW_FIELDS as resolved; attempts: the tries that failed it; run: the run's columns."""
    record = {**_fields(row), "status": FAILED, "error": error, "attempts": attempts}
    return {**record, **run, "t": time.time()}


def ok_record(row: dict[str, Any], audio: dict[str, Any], **run: Any) -> dict[str, Any]:
    """audio: file, bytes, codes_saved, num_frames, num_samples, sample_rate, hit_frame_budget,
    segments, segment_frames, text_tokens, attempts, kept_seed, segment_seeds and the measures
    (with segment_chars_per_s), and under --loudness loudness_lufs and loudness_status."""
    duration = audio["num_samples"] / audio["sample_rate"]
    record = {**_fields(row), "status": OK, "error": None, **audio, "duration_s": duration}
    return {**record, **run, "t": time.time()}


def pending_records(ids: pa.Array | pa.ChunkedArray, *, run: str) -> pa.Table:
    """Rows that are not done after all: they must be redone."""
    return stamped(pa.table({"id": ids}), status=PENDING, run=run)


def stamped(rows: pa.Table, *, status: str, **columns: str) -> pa.Table:
    """rows (ROW_FIELDS and error) as records of `status`, with run columns and the time."""
    n = rows.num_rows
    table = rows.select([c for c in (*ROW_FIELDS, "error") if c in rows.column_names])
    table = table.append_column("status", pa.array([status], pa.string()).take(np.zeros(n, int)))
    for name, value in columns.items():
        table = table.append_column(name, pa.array([value], pa.string()).take(np.zeros(n, int)))
    return table.append_column("t", pa.array(np.full(n, time.time())))


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in ROW_FIELDS}


def empty() -> pa.Table:
    return RECORD_SCHEMA.empty_table()


def to_table(records: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(records, schema=RECORD_SCHEMA)


# What deciding the work reads of each record: a run with nothing to do holds no more.
_OUTCOME = ("id", "status", "error", "file", "bytes", "codes_saved", "hit_frame_budget")
_RUN = ("settings", "segments", "split", "text_tokens", "attempts", "on_budget", "t")
SCAN_COLUMNS = (*_OUTCOME, *INPUT_FIELDS, *_RUN)


def text_digests(texts: pa.ChunkedArray | pa.Array, chunk: int = 1 << 16) -> pa.Array:
    """A 64-bit digest (blake2b) of each text, null for null: what resume compares."""
    out = [pa.array([], pa.int64())]
    for start in range(0, len(texts), chunk):
        values = texts.slice(start, chunk).to_pylist()
        out.append(pa.array([None if t is None else _digest(t) for t in values], pa.int64()))
    return pa.concat_arrays(out)


def _digest(text: str) -> int:
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def conform(table: pa.Table, columns: tuple[str, ...] | None = None) -> pa.Table:
    """`table` with RECORD_SCHEMA's columns (or `columns`), missing ones null: old states merge."""
    schema = (
        RECORD_SCHEMA if columns is None else pa.schema([RECORD_SCHEMA.field(c) for c in columns])
    )
    has, n = table.column_names, table.num_rows
    arrays = [table[f.name].cast(f.type) if f.name in has else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def one_chunk(held: list[pa.Table]) -> pa.Table:
    """The table in `held` (taken out of it, so no caller's frame keeps it alive) with each
    column in one chunk, combined a column at a time: a table of many row groups is never twice."""
    table = held.pop()
    schema, arrays = table.schema, []
    for name in schema.names:
        column = table[name]
        arrays.append(column.chunk(0) if column.num_chunks == 1 else column.combine_chunks())
        table = table.drop_columns([name])
    return pa.Table.from_arrays(arrays, schema=schema)


# Scan columns that repeat a few values over every row: held dictionary-encoded through a run's
# scan, four bytes a row instead of a string each (about 0.4 GB at ten million rows).
REPEATED = ("settings", "split", "on_budget", "speaker", "language")


def with_repeated_encoded(table: pa.Table, names: tuple[str, ...] = REPEATED) -> pa.Table:
    """table with `names` dictionary-encoded (Arrow's compute reads them as their values)."""
    for name in names:
        if name in table.column_names and not pa.types.is_dictionary(table.schema.field(name).type):
            at = table.schema.get_field_index(name)
            table = table.set_column(at, name, pc.dictionary_encode(table[name]))
    return table


def as_bools(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean column as numpy, null counted as False."""
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def latest(table: pa.Table) -> pa.Table:
    """One record per id, the newest by `t`; equal times keep the later one in table order."""
    if table.num_rows == 0:
        return table
    order = pc.sort_indices(
        table.select(["id", "t"]), sort_keys=[("id", "ascending"), ("t", "ascending")]
    )  # stable: ties stay in table order
    table = table.take(order)
    ids = table["id"].combine_chunks()
    last = np.ones(len(ids), dtype=bool)
    if len(ids) > 1:
        same_as_next = pc.equal(ids.slice(0, len(ids) - 1), ids.slice(1))
        last[:-1] = ~pc.fill_null(same_as_next, False).to_numpy(zero_copy_only=False)
    return table.filter(pa.array(last))


# What merging records reads (`latest`: id, t; `settled`: status, run): every reader reads them.
MERGE_COLUMNS = ("id", "status", "run", "t")


def overlay(base: pa.Table, newer: pa.Table) -> pa.Table:
    """base (one record per id) with newer's latest record of an id in its place; base's columns."""
    newer = latest(settled(newer))
    if newer.num_rows == 0:
        return base
    newer = newer.select(base.column_names)
    kept = base.filter(pc.invert(pc.is_in(base["id"], value_set=newer["id"].combine_chunks())))
    return pa.concat_tables([kept, newer])


def settled(table: pa.Table) -> pa.Table:
    """Drop each pending record that an outcome of the same run follows: journals of one run
    come from several machines (Ray actors), whose clocks may disagree about `t`."""
    pending = pc.fill_null(pc.equal(table["status"], PENDING), False)
    if not pc.any(pending).as_py():
        return table
    key = pc.binary_join_element_wise(table["id"], pc.fill_null(table["run"], ""), "\x00")
    done = pc.filter(key, pc.invert(pending))
    outcome_later = pc.and_(pending, pc.is_in(key, value_set=combined(done)))
    return table.filter(pc.invert(outcome_later))


def combined(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """column as one Array (a ChunkedArray's chunks combined)."""
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


# index_in's hash table holds a copy of every value: half a gigabyte for ten million ids, beside
# all a resume scan already holds. Hashed PART values at a time, at one more pass over the keys.
PART = 1 << 20


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
