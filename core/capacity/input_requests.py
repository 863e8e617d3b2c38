"""An input file's rows as the requests the job would run, for `qtts plan`.

The rows are read and checked for length as the job reads them (qtts.core.jobs.rows.manifest: a
manifest as `qtts batch` reads it, its columns named as the job names them (--id-column,
--text-column, --column), anything else as `qtts synth`'s text lines;
qtts.core.jobs.work.lengths), ordered longest first, and the first chunk is cut into requests by
the job's own code (qtts.core.jobs.work.chunks.chunk_requests): a long row becomes its segment
requests under the same split tuning, so the plan's length groups are the dry run's. Every row
takes one voice (--speaker, or the checkpoint's first), as the prompt's length hardly depends on
which. Without a tokenizer (--size) token counts are estimated from the text's bytes, and the same
code cuts with those counts. Knows rows, requests and the TextModel; no tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.contract.spec import ManifestColumns, SplitOptions
from qtts.core.jobs.rows.manifest import BLANK, read_manifest, read_text_lines
from qtts.core.jobs.rows.sources import looks_like_manifest
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.jobs.work.chunks import CHUNK_ROWS, Todo, chunk_requests, planned_frames
from qtts.core.jobs.work.lengths import check_lengths
from qtts.core.model.config import ModelConfig
from qtts.core.synthesis.requests import Request

ESTIMATED_BYTES_PER_TOKEN = 3  # Qwen2 BPE: ~4 bytes per English token, ~3 per CJK character


@dataclass(frozen=True)
class EstimatedText:
    """The text side of a published size (no tokenizer): token counts from the text's bytes."""

    name: str
    config: ModelConfig
    max_tokens_per_byte: float | None = None  # unknown: the length check counts every row

    def count_text_tokens(self, texts: Sequence[str]) -> list[int]:
        return [max(1, math.ceil(len(t.encode()) / ESTIMATED_BYTES_PER_TOKEN)) for t in texts]


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
    nothing = pa.nulls(n, pa.string())
    return pa.table(
        {
            "id": rows["id"],
            "text": rows["text"],
            "row": rows["row"],
            "speaker": pa.repeat(pa.scalar(voice, pa.string()), n),  # no Python object per row
            "language": pa.repeat(pa.scalar("auto", pa.string()), n),
            "instruct": nothing,
            "seed": pa.array(np.zeros(n, dtype=np.int64)),
            "ref_audio": nothing,
            "ref_text": nothing,
            "voice": nothing,
        }
    )
