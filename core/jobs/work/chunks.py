"""The rows to synthesize, handed out as requests a chunk at a time.

The job's to-do table is ordered longest first by its frame estimate (an out-of-memory batch
shows up at the start of a night, not at the end, and rows of similar length share the engine)
and cut into chunks of CHUNK_ROWS: only one chunk's rows exist as Python objects, so memory
follows the chunk, not the dataset. Within a chunk each row's token count is exact and its frame
budget final; the chunk is re-sorted by that exact estimate. A job smaller than a chunk is one
call to the synthesizer, as it always was (split rows aside: qtts.core.jobs.long_text.segments). A
row the split settings cut becomes one request per segment, each with the budget of its own text,
and the frame-budget check applies to each segment. Knows the budget rules and the TextModel's
counter.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.long_text.segments import SplitRows, cut_rows, segment_id, segment_seed
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.jobs.work.lengths import count_tokens
from qtts.core.synthesis.requests import Request

CHUNK_ROWS = 65536  # rows per synthesizer call: ~100 MB of prompts, minutes of GPU work
# Why a one-word piece is still too long with splitting on: no boundary the splitter cuts at.
UNCUT = (
    " (--split cuts at sentence, clause and word boundaries only, and found none short enough "
    "here: a word this long stays whole)"
)
REQUEST_FIELDS = (
    "id",
    "text",
    "row",
    "speaker",
    "language",
    "instruct",
    "seed",
    "ref_audio",
    "ref_text",
    "voice",
)


@dataclass
class Todo:
    """The rows to synthesize and their order, longest first by frame estimate; the table is
    never copied whole in that order: each chunk takes its own rows."""

    rows: pa.Table  # records.ROW_FIELDS, in input order
    order: np.ndarray  # indices into rows, longest first
    est_frames: np.ndarray  # per row of `order`

    @classmethod
    def of(cls, rows: pa.Table, est_frames: np.ndarray) -> Todo:
        order = longest_first(rows["row"], est_frames)
        return cls(rows, order, est_frames[order])

    @property
    def num_rows(self) -> int:
        return len(self.order)

    def slices(self, size: int | None = None) -> Iterator[pa.Table]:
        size = size or CHUNK_ROWS
        for start in range(0, self.num_rows, size):
            yield self.rows.take(pa.array(self.order[start : start + size]))

    def ordered(self, columns: list[str]) -> pa.Table:
        return self.rows.select(columns).take(pa.array(self.order))


@dataclass
class Chunk:
    requests: list[Request]  # longest first; a split row's segments stand in for the row
    rows: dict[str, dict[str, Any]]  # id -> the row's fields, for its record
    budgets: dict[str, int] = field(default_factory=dict)  # row id -> max_new_tokens (split:
    # its longest segment's), for its record's messages
    est_frames: list[int] = field(default_factory=list)  # per request
    split: SplitRows = field(default_factory=SplitRows)


def longest_first(rows: pa.ChunkedArray, est_frames: np.ndarray) -> np.ndarray:
    """Indices ordering rows by estimated frames, longest first; ties keep input order."""
    order = pc.sort_indices(
        pa.table({"est": pa.array(est_frames), "row": rows}),
        sort_keys=[("est", "descending"), ("row", "ascending")],
    )
    return order.to_numpy()


def chunk_requests(
    rows: pa.Table, model: TextModel, budget: FrameBudget, split: SplitOptions | None = None
) -> Chunk:
    """Requests for `rows` with exact budgets, longest first."""
    fields = rows.to_pylist()
    tokens = count_tokens(model, [r["text"] for r in fields])
    cuts = cut_rows(
        [r["text"] for r in fields], tokens.tolist(), partial(count_tokens, model), split
    )
    units = [(i, k, text) for i, texts in enumerate(cuts) for k, text in enumerate(texts)]
    counts = tokens
    if len(units) > len(fields):  # whole rows keep their count; segments are counted
        cut = np.array([len(cuts[i]) > 1 for i, _, _ in units])
        counts = tokens[[i for i, _, _ in units]]
        counts[cut] = count_tokens(model, [u[2] for u, c in zip(units, cut, strict=True) if c])
    budgets = budget.max_new_tokens_of(counts).tolist()
    est = budget.estimate_frames_of(counts).tolist()
    chunk = Chunk([], {r["id"]: r for r in fields})
    if split is not None:
        chunk.split.pause_s = split.pause_s
    entries = []
    for i, row in enumerate(fields):
        row["text_tokens"] = int(tokens[i])  # recorded: other split settings are checked by it
    for j, (i, k, text) in enumerate(units):
        row, count = fields[i], len(cuts[i])
        request = Request(**{f: row[f] for f in REQUEST_FIELDS}, max_new_tokens=budgets[j])
        if count > 1:
            request = replace(
                request, id=segment_id(row["id"], k), text=text, seed=segment_seed(row["seed"], k)
            )
            chunk.split.add(request, row["id"], k, count)
        chunk.budgets[row["id"]] = max(chunk.budgets.get(row["id"], 0), budgets[j])
        # With splitting on, no row was refused for length before: each segment is checked here.
        too_long = budget.too_long(int(counts[j])) if split is not None and split.enabled else None
        if too_long is not None and row["id"] not in chunk.split.failed:
            where = f"segment {k + 1}/{count}: " if count > 1 else ""
            uncut = UNCUT if len(text.split()) == 1 else ""  # else: --max-new-tokens is why
            chunk.split.failed[row["id"]] = where + too_long + uncut
        entries.append((-est[j], row["row"], k, request, est[j]))
    entries.sort(key=lambda e: e[:3])
    failed = chunk.split.failed
    for *_, request, frames in entries:
        if chunk.split.row_of(request.id) not in failed and request.id not in failed:
            chunk.requests.append(request)
            chunk.est_frames.append(frames)
    return chunk


def planned_frames(todo: Todo, first: Chunk | None) -> int:
    """The frames the rows to synthesize should make: the first chunk's requests as cut, each
    within its own budget (a split row's segments too), then the estimate of the rows after it."""
    if first is None:
        return int(todo.est_frames.sum())
    return sum(first.est_frames) + int(todo.est_frames[CHUNK_ROWS:].sum())


def chunks(
    todo: Todo,
    model: TextModel,
    budget: FrameBudget,
    size: int | None = None,
    split: SplitOptions | None = None,
) -> Iterator[Chunk]:
    """The job's requests, longest first, a chunk at a time."""
    for rows in todo.slices(size):
        yield chunk_requests(rows, model, budget, split)
