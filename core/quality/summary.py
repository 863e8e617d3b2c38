"""The one-line report of a `qtts score` pass: counts, and per score its mean and percentiles over
every scored file of the dataset (not only this pass's). Knows columns; no files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.output.results import SCORE_FIELDS

PERCENTILES = (5, 50, 95)
DIGITS = 4


def summarize(table: pa.Table, *, todo: int, done: int, failed_now: int) -> dict:
    """rows: files in the dataset; scored: scored by this pass (of the `done` it got through,
    fewer than `todo` when a signal stopped it); skipped: already scored by the same scorers;
    failed: files whose latest attempt failed (their `error`)."""
    stats = {}
    for field in SCORE_FIELDS:
        if not pa.types.is_floating(field.type):
            continue
        values = pc.drop_null(table[field.name]).to_numpy()
        if len(values):
            stats[field.name] = {
                "n": len(values),
                "mean": round(float(values.mean()), DIGITS),
                **{f"p{q}": round(float(np.percentile(values, q)), DIGITS) for q in PERCENTILES},
            }
    return {
        "rows": table.num_rows,
        "scored": done - failed_now,
        "skipped": table.num_rows - todo,
        "failed": table.num_rows - table["error"].null_count,
        "stats": stats,
    }
