"""What a run has to do, decided from its rows and the shard's state before any weights load: rows
done, rows to repack, rows to redo and why, rows failing validation, rows to synthesize in order.
Knows columns and the resume and length rules; writes nothing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.contract.spec import OutputOptions, SplitOptions
from qtts.core.jobs.output.stores.presence import Listing
from qtts.core.jobs.rows.validation import Prepared
from qtts.core.jobs.state.records import combined
from qtts.core.jobs.work.budget import FrameBudget, check_lengths, recheck_budget
from qtts.core.jobs.work.chunks import Todo
from qtts.core.jobs.work.fingerprint import JobFingerprint
from qtts.core.jobs.work.resume import ResumeScan, scan
from qtts.core.jobs.work.split_rules import recheck_split


@dataclass
class Work:
    todo: Todo  # rows to synthesize and their order
    rejected: pa.Table  # rows failing validation, with "error" (too long included)
    resume: ResumeScan
    total: int  # rows of this shard
    ids: pa.Array | pa.ChunkedArray | None = None  # the valid rows' ids (resume's order)

    def moved_ids(self) -> pa.Array:
        """The ids of the rows to repack."""
        if self.ids is None or not self.resume.moved.any():
            return pa.array([], pa.string())
        return combined(self.ids.filter(pa.array(self.resume.moved)))

    @property
    def skipped(self) -> int:
        return int((self.resume.done & ~self.resume.moved).sum())

    @property
    def moved(self) -> int:
        """Rows done in another layout or format: repacked into this run's, no synthesis."""
        return int(self.resume.moved.sum())


def decide_work(
    prepared: Prepared,
    records: pa.Table,
    listing: Listing,
    *,
    model: TextModel,
    budget: FrameBudget,
    settings: JobFingerprint,
    registry: dict,
    output: OutputOptions,
    split: SplitOptions | None = None,
    on_budget: str | None = None,
) -> Work:
    """records: the shard's latest (empty with --overwrite); split, on_budget: None checks none."""
    valid = prepared.valid()
    resume = scan(
        valid,
        records,
        listing,
        settings=settings.digest,
        output=output,
        registry=registry,
        current=settings.values,
    )
    if split is not None:
        resume = recheck_split(resume, valid, records, split, model)
    if on_budget is not None:
        resume = recheck_budget(resume, valid, records, on_budget)
    resume.moved &= resume.done  # a row those rules redo is made again, not repacked
    candidates = _keep(valid, ~resume.done)
    lengths = check_lengths(candidates["text"], model, budget, split)
    fits = lengths.error.is_null().to_numpy(zero_copy_only=False)
    error_at = candidates.schema.get_field_index("error")
    too_long = candidates.set_column(error_at, "error", lengths.error).filter(pa.array(~fits))
    todo = Todo.of(_keep(candidates, fits), lengths.est_frames[fits])
    rejected = pa.concat_tables([prepared.rejected(), too_long])
    return Work(todo, rejected, resume, prepared.rows.num_rows, valid["id"])


def _keep(table: pa.Table, mask: np.ndarray) -> pa.Table:
    """table.filter(mask), without copying a million rows when the mask keeps them all."""
    return table if mask.all() else table.filter(pa.array(mask))
