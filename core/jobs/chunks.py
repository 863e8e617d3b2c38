"""The rows to synthesize, handed out as requests a chunk at a time.

The job's to-do table is ordered longest first by its frame estimate (an out-of-memory batch
shows up at the start of a night, not at the end, and rows of similar length share the engine)
and cut into chunks of CHUNK_ROWS: only one chunk's rows exist as Python objects, so memory
follows the chunk, not the dataset. Within a chunk each row's token count is exact and its frame
budget final; the chunk is re-sorted by that exact estimate. A job smaller than a chunk is one
call to the synthesizer, as it always was. Knows the budget rules and the TextModel's counter.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.budget import FrameBudget
from qtts.core.jobs.interfaces import TextModel
from qtts.core.jobs.lengths import count_tokens
from qtts.core.synthesis.requests import Request

CHUNK_ROWS = 65536  # rows per synthesizer call: ~100 MB of prompts, minutes of GPU work
REQUEST_FIELDS = ("id", "text", "row", "speaker", "language", "instruct", "seed", "ref_audio",
                  "ref_text")  # fmt: skip


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
    requests: list[Request]  # longest first
    rows: dict[str, dict[str, Any]]  # id -> the row's fields, for its record


def longest_first(rows: pa.ChunkedArray, est_frames: np.ndarray) -> np.ndarray:
    """Indices ordering rows by estimated frames, longest first; ties keep input order."""
    order = pc.sort_indices(
        pa.table({"est": pa.array(est_frames), "row": rows}),
        sort_keys=[("est", "descending"), ("row", "ascending")],
    )
    return order.to_numpy()


def chunk_requests(rows: pa.Table, model: TextModel, budget: FrameBudget) -> Chunk:
    """Requests for `rows` with exact budgets, longest first."""
    fields = rows.to_pylist()
    tokens = count_tokens(model, [r["text"] for r in fields])
    budgets = budget.max_new_tokens_of(tokens).tolist()
    est = budget.estimate_frames_of(tokens).tolist()
    order = sorted(range(len(fields)), key=lambda i: (-est[i], fields[i]["row"]))
    requests = [Request(**{k: fields[i][k] for k in REQUEST_FIELDS}, max_new_tokens=budgets[i])
                for i in order]  # fmt: skip
    return Chunk(requests, {r["id"]: r for r in fields})


def chunks(todo: Todo, model: TextModel, budget: FrameBudget,
           size: int | None = None) -> Iterator[Chunk]:  # fmt: skip
    """The job's requests, longest first, a chunk at a time."""
    for rows in todo.slices(size):
        yield chunk_requests(rows, model, budget)
