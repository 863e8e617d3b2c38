"""`qtts results` on an out dir this process cannot write (a read-only mount, a published
dataset, no write permission): the counts, the quality summary and `--report` from its state as
it is, with nothing written in it.

The views are built as a rebuild builds them (results.rebuild_once: the same states, journals
and listing, the same picks), but into a temporary folder removed afterwards (in OUT/.qtts where
that can be written, else in $TMPDIR), so the summary and the report read the results.parquet a
rebuild would write now. OUT's own results.parquet and metadata.jsonl stay as they were.
Knows the views; no models.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from qtts.core.jobs.output.results import (
    RESULTS_NAME,
    ViewsNotWritable,
    counts_summary,
    job_rows,
    rebuild_once,
    rebuilt_counts,
)
from qtts.core.jobs.output.stores.listing import list_out_dir
from qtts.core.jobs.state.paths import StatePaths


@dataclass(frozen=True)
class Views:
    summary: dict  # the counts, as `qtts results` prints them (results.counts_summary)
    results: Path  # a results.parquet as of the state now: OUT's own, or one built aside
    not_rebuilt: str | None  # why OUT's views were left as they were; None: they were rebuilt


@contextmanager
def current_views(out_dir: Path, source: str | None = None) -> Iterator[Views]:
    """The views rebuilt in OUT under the results lock; where that lock cannot be opened,
    built aside from the state as it is (the temporary folder lives for the `with` block)."""
    job, rows = job_rows(out_dir, source)
    try:
        counts = rebuilt_counts(out_dir, rows)
    except ViewsNotWritable as e:
        why = e.strerror or str(e)
    else:
        summary = {**counts_summary(out_dir, job, counts), "rebuilt": True}
        yield Views(summary, out_dir / RESULTS_NAME, None)
        return
    with tempfile.TemporaryDirectory(prefix="qtts-results-", dir=_aside_in(out_dir)) as aside:
        counts = rebuild_once(out_dir, rows, list_out_dir(out_dir, sizes=False), Path(aside))
        summary = {**counts_summary(out_dir, job, counts), "rebuilt": False}
        yield Views(summary, Path(aside) / RESULTS_NAME, why)


def _aside_in(out_dir: Path) -> Path | None:
    """Where the views are built aside: OUT/.qtts where this process may write there (the lock
    alone cannot be opened), so ten million rows' staged columns and results.parquet land on the
    out dir's disk, not in $TMPDIR (often small, or memory); else $TMPDIR (None)."""
    folder = StatePaths(out_dir).dir
    return folder if os.access(folder, os.W_OK | os.X_OK) else None
