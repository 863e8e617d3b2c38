"""The frame budget of a row (an explicit --max-new-tokens exactly; else the checkpoint's cap or a
runaway guard from the text's length, the lower), the "text too long" check, and the resume rule
of the --on-budget policy (docs/job-state.md, "The fingerprint and the resume rule").
check_lengths holds whole columns of texts to the budget, tokenizing only where it decides
something: a byte-level tokenizer gives at most `max_tokens_per_byte` tokens a byte, so a row too
short in bytes to be too long is never counted; frame estimates use a tokens-per-byte ratio
measured on a sample of the rows. With --split no row is refused there (each segment is checked
when its chunk is cut). Knows the budget arithmetic, record columns and the TextModel's counter;
no files or tensors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.rows.ids import patched
from qtts.core.jobs.state.records import combined
from qtts.core.jobs.work.resume import ResumeScan

FRAME_S = 0.08  # audio per frame: the 12 Hz codec runs at 12.5 frames per second

# Runaway guard: 8 s for any text, plus 8 frames (0.64 s) per text token. Normal speech runs at
# 2-5 frames per text token, so the guard is about twice the slowest normal delivery.
GUARD_BASE_FRAMES = 100
GUARD_FRAMES_PER_TOKEN = 8
# Fast speech needs about 2 frames per text token; below 1.5 no model can say the whole text.
MIN_FRAMES_PER_TOKEN = 1.5
# What the synthesis order sorts by: a typical delivery.
EST_FRAMES_PER_TOKEN = 4
# Prompt positions around the text (role markers, codec prefix, speaker): the synthesizer checks
# the exact prompt, instruct and reference tokens included.
PROMPT_OVERHEAD = 16


@dataclass(frozen=True)
class FrameBudget:
    """cap: the checkpoint's max_new_tokens; explicit: --max-new-tokens; max_positions: talker's."""

    cap: int
    explicit: int | None = None
    max_positions: int | None = None

    def __post_init__(self) -> None:
        if self.explicit is not None and self.explicit < 1:
            raise ValueError(f"--max-new-tokens must be >= 1, got {self.explicit}")
        if self.cap < 1:
            raise ValueError(f"generation_config.json: max_new_tokens must be >= 1, got {self.cap}")

    def max_new_tokens(self, text_tokens: int) -> int:
        """The talker step budget for a text of `text_tokens` tokens."""
        return int(self.max_new_tokens_of(np.array([text_tokens]))[0])

    def too_long(self, text_tokens: int) -> str | None:
        """Reason the text cannot be spoken within the checkpoint's budget, or None. An explicit
        --max-new-tokens is not second-guessed (a row that runs out is flagged instead), but the
        prompt and the frames must fit the model's positions either way."""
        positions = text_tokens + PROMPT_OVERHEAD + self.max_new_tokens(text_tokens)
        if self.max_positions is not None and positions > self.max_positions:
            return (
                f"text too long for the model: {text_tokens} text tokens and max_new_tokens "
                f"{self.max_new_tokens(text_tokens)} need about {positions} positions, the model "
                f"has {self.max_positions}; split the text or lower --max-new-tokens"
            )
        if self.explicit is not None:
            return None
        needed = int(MIN_FRAMES_PER_TOKEN * text_tokens)
        frames = self.cap - 1  # the last step's token never gets its residual codes
        if needed > frames:
            return (
                f"text too long for the frame budget: {text_tokens} text tokens need about "
                f"{needed} frames, the model allows {frames} (max_new_tokens {self.cap}); "
                "split the text"
            )
        return None

    def estimate_frames(self, text_tokens: int) -> int:
        """Expected frames, for sorting rows into batches of similar length."""
        return min(EST_FRAMES_PER_TOKEN * max(text_tokens, 1), self.max_new_tokens(text_tokens))

    # The same rules over whole columns of token counts.
    def max_new_tokens_of(self, tokens: np.ndarray) -> np.ndarray:
        if self.explicit is not None:
            return np.full(len(tokens), self.explicit, dtype=np.int64)
        return np.minimum(self.cap, GUARD_BASE_FRAMES + GUARD_FRAMES_PER_TOKEN * tokens)

    def too_long_mask(self, tokens: np.ndarray) -> np.ndarray:
        """too_long(t) is not None, for each t."""
        mask = np.zeros(len(tokens), dtype=bool)
        if self.max_positions is not None:
            mask |= tokens + PROMPT_OVERHEAD + self.max_new_tokens_of(tokens) > self.max_positions
        if self.explicit is None:
            mask |= (MIN_FRAMES_PER_TOKEN * tokens).astype(np.int64) > self.cap - 1
        return mask

    def estimate_frames_of(self, tokens: np.ndarray) -> np.ndarray:
        est = EST_FRAMES_PER_TOKEN * np.maximum(tokens, 1)
        return np.minimum(est, self.max_new_tokens_of(tokens))


SAMPLE_ROWS = 1024  # rows counted exactly to learn this job's tokens per byte
COUNT_BATCH = 8192  # texts per tokenizer call


@dataclass(frozen=True)
class Lengths:
    error: pa.Array  # "text too long ..." or null, per row
    tokens: np.ndarray  # text tokens per row: exact where counted, else estimated
    est_frames: np.ndarray  # frames each row is expected to take


def count_tokens(model: TextModel, texts: list[str]) -> np.ndarray:
    batches = range(0, len(texts), COUNT_BATCH)
    counts = [model.count_text_tokens(texts[i : i + COUNT_BATCH]) for i in batches]
    return np.concatenate([np.zeros(0, np.int64), *counts]).astype(np.int64)


def check_lengths(
    texts: pa.ChunkedArray | pa.Array,
    model: TextModel,
    budget: FrameBudget,
    split: SplitOptions | None = None,
) -> Lengths:
    """split: rows are cut, so none is refused here (segments are checked as chunks are cut)."""
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
    """est with each row over `limit` as ceil(tokens / limit) segments or more, each budgeted."""
    cut = tokens > limit
    segments = -(-tokens[cut] // limit)
    most = segments * budget.max_new_tokens(limit)
    out = est.copy()
    out[cut] = np.minimum(EST_FRAMES_PER_TOKEN * tokens[cut], most)
    return out


def _count(model: TextModel, texts: pa.ChunkedArray | pa.Array, mask: np.ndarray) -> np.ndarray:
    return count_tokens(model, texts.take(pa.array(np.flatnonzero(mask))).to_pylist())


LEGACY_KEY = "ok"  # a record made before the policy was recorded (see above)


def recheck_budget(resume: ResumeScan, valid: pa.Table, records: pa.Table, key: str) -> ResumeScan:
    """resume with the done rows whose codes `key`'s policy would not keep made stale."""
    at = np.flatnonzero(resume.done)
    if len(at) == 0 or resume.record_at is None:
        return resume
    index = resume.record_at.take(pa.array(at))
    # The usual rerun, decided on booleans: no copy of ten million keys.
    same = pc.equal(records["on_budget"], key)
    if pc.all(pc.fill_null(same, LEGACY_KEY == key).take(index)).as_py():
        return resume
    keys = combined(pc.fill_null(records["on_budget"].take(index), LEGACY_KEY))
    attempts = _numpy(pc.fill_null(records["attempts"].take(index), 1))
    hit = _numpy(pc.fill_null(records["hit_frame_budget"].take(index), False))
    changed = _numpy(pc.not_equal(keys, key)) & ~kept_by(key, attempts, hit)
    if not changed.any():
        return resume
    counts = pc.value_counts(pc.filter(keys, pa.array(changed))).to_pylist()
    reasons = {f"on-budget {r['values']} -> {key}": r["counts"] for r in counts}
    return resume.redo(at[changed], valid["id"], reasons)


def kept_by(key: str, attempts: np.ndarray, hit: np.ndarray) -> np.ndarray:
    """Whether policy `key` keeps each row's codes, by the try they came from and budget hit."""
    policy, _, limit = key.partition("/")
    if policy == "retry":
        return ~hit & (attempts <= int(limit))
    if policy == "ok":
        return attempts == 1  # stopped or flagged: the first try is what ok keeps
    return (attempts == 1) & ~hit  # fail


def _numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return combined(column).to_numpy(zero_copy_only=False)
