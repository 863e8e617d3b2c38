"""The rows to synthesize, longest first by frame estimate (an out-of-memory batch shows at the
start of a night, not its end), handed out as requests a chunk of CHUNK_ROWS at a time: only one
chunk's rows are Python objects. Within a chunk each row's tokens are exact and its budget final.
The job's face for its work: an input's requests as a job would run them (input_requests, for
`qtts plan` and the manifest bench), the budget and split rules, a chunk's synthesis.
Knows the budget rules, the rows' readers and the TextModel's counter; no tensors."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.contract.spec import ManifestColumns, SplitOptions
from qtts.core.jobs.long_text.segments import (
    SplitRows,
    cut_rows,
    row_of_segment,
    segment_id,
    segment_seed,
    synthesize_chunk,
)
from qtts.core.jobs.rows.manifest import BLANK, read_manifest, read_text_lines
from qtts.core.jobs.rows.sources import looks_like_manifest
from qtts.core.jobs.state.records import ROW_FIELDS
from qtts.core.jobs.work.budget import FrameBudget, check_lengths, count_tokens
from qtts.core.jobs.work.split_rules import settle_segment_limit
from qtts.core.model.config import ModelConfig
from qtts.core.synthesis.requests import Request

# The job's face for its work: the budget and split rules, a chunk's synthesis (their modules' own)
__all__ = [
    "CHUNK_ROWS", "Chunk", "FrameBudget", "InputRequests", "Todo", "chunk_requests", "chunks",
    "input_requests", "planned_frames", "settle_segment_limit", "synthesize_chunk",
]  # fmt: skip
CHUNK_ROWS = 65536  # rows per synthesizer call: ~100 MB of prompts, minutes of GPU work
# Why a one-word piece is still too long with splitting on: no boundary the splitter cuts at.
UNCUT = (
    " (--split cuts at sentence, clause and word boundaries only, and found none short enough "
    "here: a word this long stays whole)"
)
# A row's fields a request takes: its record's inputs but the digests.
REQUEST_FIELDS = tuple(f for f in ROW_FIELDS if not f.endswith("_digest"))


@dataclass
class Todo:
    """The rows to synthesize, longest first by frame estimate; each chunk takes its own rows."""

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
        if row_of_segment(request.id) not in failed and request.id not in failed:
            chunk.requests.append(request)
            chunk.est_frames.append(frames)
    return chunk


def planned_frames(todo: Todo, first: Chunk | None) -> int:
    """Frames the rows should make: the first chunk's as cut, then the estimate of the rest."""
    if first is None:
        return int(todo.est_frames.sum())
    return sum(first.est_frames) + int(todo.est_frames[CHUNK_ROWS:].sum())


def chunks(
    todo: Todo, model: TextModel, budget: FrameBudget, split: SplitOptions | None = None
) -> Iterator[Chunk]:
    """The job's requests, longest first, a chunk at a time."""
    for rows in todo.slices():
        yield chunk_requests(rows, model, budget, split)


@dataclass(frozen=True)
class InputRequests:
    requests: list[Request]  # the first chunk's, longest first: what the memory plan must fit
    rows: int  # rows the job would synthesize
    refused: int  # rows it would refuse as too long (whole, or a segment of them)
    split_rows: int  # rows of the first chunk cut into segments
    frames: int  # the frames the rows should make (qtts.core.jobs.work.chunks.planned_frames)
    more_chunks: bool  # the job has rows beyond the first chunk (planned apart, shorter)


def input_requests(
    text_model: TextModel,
    source: str,
    budget: FrameBudget,
    split: SplitOptions,
    speaker: str | None,
    columns: ManifestColumns | None = None,
) -> InputRequests:
    """`source`'s rows as a job would run them, its first chunk cut: what `qtts plan` groups."""
    rows = _read_rows(source, columns or ManifestColumns())
    table = _request_rows(rows, text_model.config, speaker)
    lengths = check_lengths(table["text"], text_model, budget, split)
    fits = lengths.error.is_null().to_numpy(zero_copy_only=False)
    todo = Todo.of(table.filter(pa.array(fits)), lengths.est_frames[fits])
    first = None
    if todo.num_rows:
        first = chunk_requests(next(todo.slices()), text_model, budget, split)
    failed = len(first.split.failed) if first else 0
    return InputRequests(
        requests=first.requests if first else [],
        rows=todo.num_rows - failed,
        refused=int((~fits).sum()) + failed,
        split_rows=len({place[0] for place in first.split.place.values()}) if first else 0,
        frames=planned_frames(todo, first),
        more_chunks=todo.num_rows > CHUNK_ROWS,
    )


def _read_rows(source: str, columns: ManifestColumns) -> pa.Table:
    if looks_like_manifest(source):
        return read_manifest(source, columns)
    if columns.renamed:  # a column name that would silently plan nothing of what was meant
        flag = columns.flag(next(iter(columns.renamed)))
        raise UsageError(
            f"{flag} names a manifest column, but {source} is read as text lines (not a "
            "manifest's extension)"
        )
    return read_text_lines(source)


def _request_rows(rows: pa.Table, config: ModelConfig, speaker: str | None) -> pa.Table:
    """The fields chunk_requests reads, for the rows with text: one voice for all, seed 0."""
    text = rows["text"]
    rows = rows.filter(pc.and_(pc.is_valid(text), pc.invert(pc.match_substring_regex(text, BLANK))))
    n = rows.num_rows
    voice = (speaker or (config.supported_speakers() or [None])[0]) if config.uses_speaker else None
    given = {
        "speaker": pa.repeat(pa.scalar(voice, pa.string()), n),  # no Python object per row
        "language": pa.repeat(pa.scalar("auto", pa.string()), n),
        "seed": pa.array(np.zeros(n, dtype=np.int64)),
    }
    nothing = pa.nulls(n, pa.string())
    own = ("id", "text", "row")
    return pa.table({f: rows[f] if f in own else given.get(f, nothing) for f in REQUEST_FIELDS})
