"""`qtts results` on an out dir this process cannot write (a read-only mount, a published
dataset, no write permission): the counts, the quality summary and `--report` from its state as
it is, with nothing written in it.

The views are built as a rebuild builds them (results.rebuild_once: the same states, journals
and listing, the same picks), but into a temporary folder removed afterwards (in OUT/.qtts where
that can be written, else in $TMPDIR), so the summary and the report read the results.parquet a
rebuild would write now. OUT's own results.parquet and metadata.jsonl stay as they were. Each
reader holds a lock in its folder for as long as it reads: a folder a killed reader left in
OUT/.qtts (nobody holds its lock) is removed by the next reader that builds aside there.
Knows the views; no models.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
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
from qtts.core.jobs.output.stores.presence import list_out_dir
from qtts.core.jobs.state.lock import OutDirLock, lock_is_held
from qtts.core.jobs.state.paths import StatePaths

ASIDE_PREFIX = "qtts-results-"
READER_LOCK = "reader.lock"
# A folder younger than this may be a reader's that has not taken its lock yet
GRACE_S = 60.0


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
        del rows  # what the caller reads next comes from results.parquet (1 GB at 10M rows)
        summary = {**counts_summary(out_dir, job, counts), "rebuilt": True}
        yield Views(summary, out_dir / RESULTS_NAME, None)
        return
    where = _aside_in(out_dir)
    if where is not None:
        remove_dead_asides(where)
    with tempfile.TemporaryDirectory(prefix=ASIDE_PREFIX, dir=where) as aside:
        with OutDirLock(Path(aside) / READER_LOCK):
            counts = rebuild_once(out_dir, rows, list_out_dir(out_dir, sizes=False), Path(aside))
            del rows
            summary = {**counts_summary(out_dir, job, counts), "rebuilt": False}
            yield Views(summary, Path(aside) / RESULTS_NAME, why)


def remove_dead_asides(folder: Path, now: float | None = None) -> list[str]:
    """Folders of readers killed while building aside (their lock held by nobody, older than
    GRACE_S), removed; their names."""
    now = time.time() if now is None else now
    removed = []
    for aside in folder.glob(f"{ASIDE_PREFIX}*"):
        try:
            young = now - aside.stat().st_mtime < GRACE_S
        except OSError:
            continue  # gone meanwhile
        if aside.is_dir() and not young and not lock_is_held(aside / READER_LOCK):
            shutil.rmtree(aside, ignore_errors=True)
            removed.append(aside.name)
    return removed


def _aside_in(out_dir: Path) -> Path | None:
    """Where the views are built aside: OUT/.qtts where this process may write there (the lock
    alone cannot be opened), so ten million rows' staged columns and results.parquet land on the
    out dir's disk, not in $TMPDIR (often small, or memory); else $TMPDIR (None)."""
    folder = StatePaths(out_dir).dir
    return folder if os.access(folder, os.W_OK | os.X_OK) else None
