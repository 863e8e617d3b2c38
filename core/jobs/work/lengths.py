"""Text length against the frame budget over whole columns, tokenizing only where it decides
something: a byte-level tokenizer gives at most `max_tokens_per_byte` tokens a byte, so a row too
short in bytes to be too long is never tokenized. Frame estimates use a tokens-per-byte ratio
measured on a sample of the rows. With --split no row is refused here (each segment is checked
when its chunk is cut). Knows the TextModel's token counter and the budget rules; no tensors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.rows.ids import patched
from qtts.core.jobs.work.budget import EST_FRAMES_PER_TOKEN, FrameBudget

SAMPLE_ROWS = 1024  # rows counted exactly to learn this job's tokens per byte
COUNT_BATCH = 8192  # texts per tokenizer call


@dataclass(frozen=True)
class Lengths:
    error: pa.Array  # "text too long ..." or null, per row
    tokens: np.ndarray  # text tokens per row: exact where counted, else estimated
    est_frames: np.ndarray  # frames each row is expected to take


def count_tokens(model: TextModel, texts: list[str]) -> np.ndarray:
    counts = [
        model.count_text_tokens(texts[i : i + COUNT_BATCH])
        for i in range(0, len(texts), COUNT_BATCH)
    ]
    return np.concatenate(counts).astype(np.int64) if counts else np.zeros(0, dtype=np.int64)


def check_lengths(
    texts: pa.ChunkedArray | pa.Array,
    model: TextModel,
    budget: FrameBudget,
    split: SplitOptions | None = None,
) -> Lengths:
    """split: long rows are cut into segments, so no row is refused here (each segment is
    checked when its chunk is cut) and only the sample is counted."""
    n = len(texts)
    refuses = split is None or not split.enabled  # rows too long fail here, unsplit
    nbytes = pc.binary_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    counted = np.zeros(n, dtype=bool)
    sample = np.unique(np.linspace(0, n - 1, min(n, SAMPLE_ROWS)).astype(np.int64))
    counted[sample] = True
    per_byte = model.max_tokens_per_byte
    bound = None if per_byte is None else np.ceil(nbytes * per_byte).astype(np.int64)
    if refuses and bound is None:
        counted[:] = True
    elif refuses:
        counted |= budget.too_long_mask(bound)
    tokens = np.zeros(n, dtype=np.int64)
    tokens[counted] = _count(model, texts, counted)
    if refuses and bound is not None and np.any(tokens[counted] > bound[counted]):
        # Not the tokenizer the bound assumes: count every row.
        rest = ~counted
        tokens[rest], counted = _count(model, texts, rest), np.ones(n, dtype=bool)
    if not counted.all():
        ratio = float(np.median(tokens[sample] / np.maximum(nbytes[sample], 1)))
        tokens[~counted] = np.maximum(np.ceil(nbytes[~counted] * ratio), 1)
    too_long = np.flatnonzero(budget.too_long_mask(tokens) & counted & refuses)
    errors = patched(
        pa.nulls(n, pa.string()), too_long, [budget.too_long(int(t)) for t in tokens[too_long]]
    )
    est = budget.estimate_frames_of(tokens)
    if not refuses:  # a row cut into segments: each segment has its own budget
        est = _split_estimate(tokens, est, budget, split.limit)
    return Lengths(errors, tokens, est)


def _split_estimate(
    tokens: np.ndarray, est: np.ndarray, budget: FrameBudget, limit: int
) -> np.ndarray:
    """est with each row over `limit` estimated as its segments: at least ceil(tokens / limit)
    of them (the cut is not known before its chunk), each within the budget of a full segment."""
    cut = tokens > limit
    segments = -(-tokens[cut] // limit)
    most = segments * budget.max_new_tokens(limit)
    out = est.copy()
    out[cut] = np.minimum(EST_FRAMES_PER_TOKEN * tokens[cut], most)
    return out


def _count(model: TextModel, texts: pa.ChunkedArray | pa.Array, mask: np.ndarray) -> np.ndarray:
    return count_tokens(model, texts.take(pa.array(np.flatnonzero(mask))).to_pylist())
