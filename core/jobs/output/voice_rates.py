"""A row's speaking rate against its own voice's (`rate_ratio_min`, `rate_ratio_max`: README), for
--min-rate-ratio and --max-rate-ratio: each piece of speech (a whole row, or each segment of a
split row) against the median of its voice's pieces (speaker, instruct, reference clip, language)
among the ok rows the views show; null for a row not ok or with no rate. Columnar: one column of
the records at a time. Knows record columns; no audio, no models.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.state.record_source import RecordSource

RATE_COLUMNS = ("rate_ratio_min", "rate_ratio_max")
VOICE_COLUMNS = ("speaker", "instruct", "ref_digest", "language")
READ_COLUMNS = ("ref_digest",)  # what rate_ratios reads that the views do not show


def rate_ratios(records: RecordSource, shown: np.ndarray) -> dict[str, pa.Array]:
    """records: a RecordSource; shown: bool [winners], the ok rows the views show. Each
    RATE_COLUMNS as an array over records.winners."""
    n = len(shown)
    positions = pa.array(records.positions())
    groups = _voice_groups(records, positions, shown)
    rate = records.column("chars_per_s").take(positions).combine_chunks()
    segments = records.column("segment_chars_per_s").take(positions).combine_chunks()
    owner, value = _pieces(rate, segments, shown)
    keep = np.isfinite(value) & (value > 0)
    owner, value = owner[keep], value[keep]
    if not len(owner):
        return {c: pa.nulls(n, pa.float64()) for c in RATE_COLUMNS}
    ratio = value / _medians(groups[owner], value)
    low, high = np.full(n, np.nan), np.full(n, np.nan)
    order = np.argsort(owner, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(owner[order]) != 0])
    rows = owner[order][starts]
    low[rows] = np.minimum.reduceat(ratio[order], starts)
    high[rows] = np.maximum.reduceat(ratio[order], starts)
    return {
        "rate_ratio_min": pa.array(low, pa.float64(), from_pandas=True),
        "rate_ratio_max": pa.array(high, pa.float64(), from_pandas=True),
    }


def _voice_groups(records: RecordSource, positions: pa.Array, shown: np.ndarray) -> np.ndarray:
    """int [winners]: one number per (speaker, instruct, reference, language). A column at a
    time: its values numbered, taken at the winners' positions, and each pair (group so far,
    this number) numbered afresh, 8 bytes a row; not each string column taken and its rows
    sorted together (1.6 GB and a minute at ten million rows, docs/scale.md)."""
    at = positions.to_numpy()
    groups = np.zeros(len(shown), dtype=np.int64)
    for name in VOICE_COLUMNS:
        codes = _numbers(records.column(name).cast(pa.string()))[at]
        pairs = groups * (int(codes.max(initial=0)) + 1) + codes  # < winners x records
        _, groups = np.unique(pairs, return_inverse=True)
    return groups.reshape(-1)


def _numbers(values: pa.ChunkedArray) -> np.ndarray:
    """Each value's index among the column's distinct values (null is one of them)."""
    index = pc.index_in(values, value_set=pc.unique(values))
    chunks = [c.to_numpy(zero_copy_only=False) for c in index.chunks]
    return np.concatenate([np.zeros(0, np.int64), *chunks]).astype(np.int64, copy=False)


def _pieces(rate: pa.Array, segments: pa.Array, shown: np.ndarray):
    """(owner row, chars_per_s) of every piece: a split row's segments, a whole row itself."""
    lengths = pc.fill_null(pc.list_value_length(segments), 0).to_numpy(zero_copy_only=False)
    split = shown & (lengths > 0)
    whole = shown & ~split & pc.is_valid(rate).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(segments.filter(pa.array(split)))
    seg_owner = np.repeat(np.flatnonzero(split), lengths[split])
    seg_value = pc.fill_null(flat, np.nan).to_numpy(zero_copy_only=False).astype(np.float64)
    whole_rows = np.flatnonzero(whole)
    whole_value = rate.take(pa.array(whole_rows)).to_numpy(zero_copy_only=False)
    owner = np.concatenate([seg_owner, whole_rows]).astype(np.int64)
    return owner, np.concatenate([seg_value, whole_value.astype(np.float64)])


def _medians(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each piece's group median (the mean of the two middle values of an even count)."""
    order = np.lexsort((values, groups))
    g, v = groups[order], values[order]
    starts = np.flatnonzero(np.r_[True, np.diff(g) != 0])
    counts = np.diff(np.r_[starts, len(g)])
    median = (v[starts + (counts - 1) // 2] + v[starts + counts // 2]) / 2
    by_group = np.zeros(int(groups.max()) + 1)
    by_group[g[starts]] = median
    return by_group[groups]
