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


def chunks(todo: pa.Table, model: TextModel, budget: FrameBudget,
           size: int = CHUNK_ROWS) -> Iterator[Chunk]:  # fmt: skip
    """todo (already longest first) a chunk at a time."""
    for start in range(0, todo.num_rows, size):
        yield chunk_requests(todo.slice(start, size), model, budget)
