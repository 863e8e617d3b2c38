"""Long rows as segments (README, "Long text"): a row the split settings cut becomes a request
per segment, with the row's voice and a seed derived from its own and the segment's index;
synthesize_chunk holds a row's segments until its last one and yields the row as one utterance.
A failed segment fails its row. Knows requests, utterances and text; no tensors, no files."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from qtts.core.jobs.contract.interfaces import Synthesizer
from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.long_text.split_text import split_texts
from qtts.core.jobs.output.recorder import chars_per_s, utterance_error
from qtts.core.synthesis.requests import (
    GenerationOptions,
    Request,
    RowFailure,
    Utterance,
    derive_seed,
)

log = logging.getLogger("qtts")

# Split rows' frames per synthesizer call: a row's segments wait in memory for its last, so this
# bounds the audio held (2**18 frames x 1920 samples x 4 bytes: 2 GB, ~5.8 h). Each call plans
# its engine passes and graphs anew, so calls stay large: minutes of GPU work each.
MAX_SPLIT_FRAMES_PER_CALL = 1 << 18
_SEPARATOR = "\x1f"  # never in a valid id (control characters are refused)


def segment_id(row_id: str, index: int) -> str:
    return f"{row_id}{_SEPARATOR}{index}"


def row_of_segment(request_id: str) -> str | None:
    """The row a segment's request id belongs to (None: a whole row's id)."""
    row_id, sep, _ = request_id.rpartition(_SEPARATOR)
    return row_id if sep else None


def segment_seed(seed: int, index: int) -> int:
    """The seed of segment `index` of a row seeded `seed`: a hash of both, in [0, 2**63)."""
    return derive_seed(seed, str(index))


def cut_rows(
    texts: Sequence[str],
    tokens: Sequence[int],
    count: Callable[[list[str]], np.ndarray],
    split: SplitOptions | None,
) -> list[list[str]]:
    """Each row's segments ([text]: left whole); count: the model's token count of texts."""
    if split is None or not split.enabled:
        return [[t] for t in texts]
    limit = split.limit
    every = split.mode == "sentence"
    picked = [i for i, n in enumerate(tokens) if every or n > limit]
    cut = split_texts([texts[i] for i in picked], limit, count, every_sentence=every)
    out = [[t] for t in texts]
    for i, segments in zip(picked, cut, strict=True):
        out[i] = segments
    return out


@dataclass
class SplitRows:
    """A chunk's rows that were cut: where each segment request belongs, and how to join them."""

    pause_s: float = 0.0
    place: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # id -> row, k, count
    requests: dict[str, Request] = field(default_factory=dict)  # segment id -> its request
    failed: dict[str, str] = field(default_factory=dict)  # row id -> why, before synthesis

    def add(self, request: Request, row_id: str, index: int, count: int) -> None:
        self.place[request.id] = (row_id, index, count)
        self.requests[request.id] = request


class SplitChunk(Protocol):
    """What synthesize_chunk reads of a chunk (qtts.core.jobs.work.chunks.Chunk)."""

    @property
    def requests(self) -> Sequence[Request]: ...

    @property
    def est_frames(self) -> Sequence[int]: ...

    @property
    def split(self) -> SplitRows: ...


def synthesize_chunk(
    synth: Synthesizer, chunk: SplitChunk, options: GenerationOptions, on_budget: str
) -> Iterator[Utterance | RowFailure]:
    """One result per row: rows failed before synthesis, then each row as it completes."""
    for row_id, reason in chunk.split.failed.items():
        yield RowFailure(row_id, reason)
    parts = calls(chunk.requests, chunk.est_frames, chunk.split)
    if len(parts) > 1:
        log.info(
            "%d synthesizer calls for this chunk: its split rows' audio is held in parts",
            len(parts),
        )
    for call in parts:
        items = synth.synthesize(call, options)
        yield from _joined(items, chunk.split, on_budget, options.attempts)


def calls(
    requests: Sequence[Request], est_frames: Sequence[int], split: SplitRows
) -> list[list[Request]]:
    """The requests cut into synthesizer calls that each hold at most MAX_SPLIT_FRAMES_PER_CALL
    frames of split rows (a row's segments always in one call); whole rows go with the first."""
    totals: dict[str, int] = {}
    for r, est in zip(requests, est_frames, strict=True):
        row = row_of_segment(r.id)
        if row is not None:
            totals[row] = totals.get(row, 0) + int(est)
    groups: list[list[Request]] = [[]]
    call_of: dict[str, int] = {}
    frames = 0
    for r in requests:
        row = row_of_segment(r.id)
        if row is None:
            groups[0].append(r)
            continue
        if row not in call_of:
            if frames and frames + totals[row] > MAX_SPLIT_FRAMES_PER_CALL:
                groups.append([])
                frames = 0
            call_of[row], frames = len(groups) - 1, frames + totals[row]
        groups[call_of[row]].append(r)
    return [g for g in groups if g]


def _joined(
    items: Iterator[Utterance | RowFailure], split: SplitRows, on_budget: str, tries: int = 1
) -> Iterator[Utterance | RowFailure]:
    held: dict[str, list[Utterance | None]] = {}
    failed = set(split.failed)
    try:
        for item in items:
            place = split.place.get(item.id)
            if place is None:  # a whole row
                yield item
                continue
            row_id, index, count = place
            if row_id in failed:
                continue
            if isinstance(item, RowFailure):
                reason = item.error
            else:
                budget = split.requests[item.id].max_new_tokens
                reason = utterance_error(item, budget, on_budget, tries)
            if reason is not None:
                failed.add(row_id)
                held.pop(row_id, None)
                yield RowFailure(row_id, f"segment {index + 1}/{count}: {reason}", item.attempts)
                continue
            parts = held.setdefault(row_id, [None] * count)
            parts[index] = item
            if all(p is not None for p in parts):
                del held[row_id]
                # A part without a seed kept its request's own (no retry, or none needed).
                asked = split.requests
                seeds = [asked[p.id].seed if p.seed is None else p.seed for p in parts]
                yield join(row_id, parts, split.pause_s, seeds, [asked[p.id].text for p in parts])
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


def join(
    row_id: str,
    parts: list[Utterance],
    pause_s: float,
    seeds: Sequence[int | None],
    texts: Sequence[str],
) -> Utterance:
    """The row's utterance: segments' audio with `pause_s` of silence between, codes in order;
    its attempts the most any segment took; seeds: each segment's kept seed; texts: each
    segment's, for its speaking rate measured apiece (qtts.core.jobs.output.voice_rates)."""
    rate = parts[0].sample_rate
    silence = np.zeros(round(pause_s * rate), dtype=np.float32)
    audio = [parts[0].audio]
    for p in parts[1:]:
        audio += [silence, p.audio]
    return Utterance(
        row_id,
        np.concatenate([p.codes for p in parts]),  # [frames, groups]
        np.concatenate(audio).astype(np.float32, copy=False),
        rate,
        hit_frame_budget=any(p.hit_frame_budget for p in parts),
        segment_frames=tuple(len(p.codes) for p in parts),
        attempts=max(p.attempts for p in parts),
        segment_seeds=tuple(seeds),
        segment_chars_per_s=tuple(
            chars_per_s(t, len(p.audio) / rate) for t, p in zip(texts, parts, strict=True)
        ),
    )
