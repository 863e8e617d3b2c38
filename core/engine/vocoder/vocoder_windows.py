"""The speech decoder's fast path: every call it makes has one of a few shapes (docs/model.md,
"Speech decoder"). Owns the window plan: the frame buckets, how rows are cut into windows, the
padding that costs, and the bucketed decode itself.

The official decode (core/model/codec.py `decode_utterances`, the twin kept for reference) runs a
group of rows in 300-frame chunks, each after the first with 25 frames of left context, so the
last chunk's length and the row count follow the data: every new shape is a new CUDA graph (on
CPU, oneDNN's setup for a new shape: seen to make a first call take seconds). Here each call is
a window [rows, Q, frames] where
- frames is a bucket: context + kept frames rounded up to the next length of a fixed table
  (`frame_buckets`: 26 lengths, 25 .. 325). The table grows geometrically, so a window of n >= 25
  frames is padded to at most 1.1 n (MAX_WASTE), and it holds the chunk (300: the first window
  of every long row) and chunk + context (325: every full later window) exactly. Windows under
  the context (clips under 2 s) are padded to it.
- rows is a power of two: the rows still decoding, longest first, are decoded together when
  their windows fall in the same bucket, in power-of-two pieces (11 rows: 8 + 2 + 1), never
  padded with dummy rows. With `join_waste` (the GPU's JOIN_WASTE), a row also joins the run of
  a longer one whose bucket pads it by at most that share: rows of a real job differ in length,
  so with each row in its own bucket most windows held one or two rows, each a call of a few
  hundred small kernels. A dummy row, or a short row padded to a long one (the official decode
  pads every row of a group to the longest), costs a row's activations (the decoder is bound by
  activation traffic, ~1.3 GB per audio-second in bf16); one more call costs one more read of
  its weights (0.2 GB, about two frames of one row).
Everything in the decoder is causal (left-padded convolutions, transposed convolutions trimmed
on the right, attention masked to earlier positions), so frames after a row's end change no
sample before it, and rows never mix: each kept sample is what the official decode computes, to
float rounding. Knows the decoder's shapes; nothing of graphs, text or files.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import torch

from qtts.core.model.codec import SpeechDecoder

CHUNK_FRAMES = 300  # frames a window keeps (the official chunk)
LEFT_CONTEXT = 25  # frames decoded again before each chunk after the first, their audio dropped
# A window of n frames (n >= the context) is decoded as at most (1 + MAX_WASTE) n. The decoder's
# cost is linear in frames, so this is the share of its work padding may waste; a finer table
# wastes less but has more lengths, and each length is one more CUDA graph per row count on GPU
# (capture time, instantiation memory) and on CPU one more set of oneDNN primitives (a new
# shape's first call is slow). 10% gives 26 lengths, twice the 13 multiples of 25 it replaces,
# which padded a 32-frame clip (2.6 s, common in datasets) to 50 frames (+56%).
MAX_WASTE = 0.10
# How much padding a row may take to share a longer row's window (GPU): a window of one 100-frame
# row leaves most of the GPU idle in the decoder's early layers, while padding costs in
# proportion. QTTS_VOCODER_JOIN=0 turns joining off (each row in its own bucket, as on a CPU,
# whose decoder cost is linear in frames and whose windows hold at most 2 rows).
JOIN_WASTE = 0.25

Forward = Callable[[torch.Tensor], torch.Tensor]  # codes [rows, Q, frames] -> [rows, frames * up]


@dataclass(frozen=True)
class Window:
    first_row: int  # rows first_row .. first_row + rows - 1 of the longest-first order
    rows: int  # a power of two
    start: int  # first frame whose audio is kept
    context: int  # frames before start decoded again, their audio dropped
    kept: int  # frames kept from start on (the piece's longest row, at most a chunk)
    frames: int  # frames decoded: a bucket >= context + kept


@lru_cache(maxsize=16)
def _table(chunk: int, context: int, max_waste: float) -> tuple[int, ...]:
    """The frame buckets, ascending. The first is the context: a later window always needs more,
    so shorter lengths would serve only first windows of clips under 2 s. Each next length is
    the largest whose padding of the shortest window it serves (previous + 1) stays within
    max_waste, cut at the next of chunk and chunk + context (lengths whole windows take, so
    those pad nothing). Fraction: the bound holds exactly, not up to float rounding."""
    if chunk < 1 or context < 0 or max_waste < 0:
        raise ValueError("vocoder windows: need chunk >= 1, context >= 0 and max_waste >= 0")
    longest, growth = chunk + context, 1 + Fraction(max_waste)
    lengths = [min(max(context, 1), longest)]
    while lengths[-1] < longest:
        anchor = min(a for a in (chunk, longest) if a > lengths[-1])
        lengths.append(min(math.floor((lengths[-1] + 1) * growth), anchor))
    return tuple(lengths)


def frame_buckets(
    chunk: int = CHUNK_FRAMES, context: int = LEFT_CONTEXT, max_waste: float = MAX_WASTE
) -> list[int]:
    """Every window length, ascending: the context up to chunk + context (25 .. 325)."""
    return list(_table(chunk, context, max_waste))


def bucket_frames(
    n: int, chunk: int = CHUNK_FRAMES, context: int = LEFT_CONTEXT, max_waste: float = MAX_WASTE
) -> int:
    """The frames a window needing n frames decodes: the smallest bucket >= n, at most the
    longest (chunk + context)."""
    table = _table(chunk, context, max_waste)
    return table[min(bisect_left(table, n), len(table) - 1)]


def worst_padding_waste(
    chunk: int = CHUNK_FRAMES,
    context: int = LEFT_CONTEXT,
    max_waste: float = MAX_WASTE,
    shortest: int | None = None,
) -> float:
    """The table's worst (decoded - needed) / needed over windows needing `shortest` (default:
    the context, 2 s) to chunk + context frames. Every window of a clip at least that long needs
    that many (a later window needs the context and more), so no such clip wastes more."""
    low = max(1, context if shortest is None else shortest)
    return max(
        (
            (bucket_frames(n, chunk, context, max_waste) - n) / n
            for n in range(low, chunk + context + 1)
        ),
        default=0.0,
    )


def batch_pieces(rows: int) -> list[int]:
    """rows as powers of two, largest first (its binary digits): 11 -> [8, 2, 1]."""
    return [1 << bit for bit in range(rows.bit_length() - 1, -1, -1) if rows >> bit & 1]


def bucket_shapes(
    max_rows: int,
    chunk: int = CHUNK_FRAMES,
    context: int = LEFT_CONTEXT,
    max_waste: float = MAX_WASTE,
) -> set[tuple[int, int]]:
    """Every (rows, frames) a group of up to max_rows can be decoded with: on GPU, the most
    CUDA graphs the vocoder captures (26 lengths x 5 row counts at 16 rows)."""
    sizes = [1 << i for i in range(max_rows.bit_length())]
    return {(b, f) for b in sizes for f in frame_buckets(chunk, context, max_waste)}


def longest_first(lengths: Sequence[int]) -> list[int]:
    """Row indices by length, longest first (ties keep their order). The rows still decoding at
    any frame are then a prefix of it, so every window is a contiguous slice of rows."""
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])


def joined_runs(needs: Sequence[int], own: Sequence[int], join_waste: float) -> list[int]:
    """Lengths of the runs of rows (needs: frames each row's window needs, longest first; own:
    each one's bucket) decoded in one bucket: a row joins the run when it has the run's bucket,
    or when that bucket pads it by at most join_waste of its need."""
    runs: list[int] = []
    top = None  # the current run's bucket
    for need, frames in zip(needs, own, strict=True):
        if top is not None and (frames == top or top - need <= join_waste * need):
            runs[-1] += 1
        else:
            runs.append(1)
            top = frames
    return runs


def cut_windows(
    lengths: Sequence[int],
    chunk: int = CHUNK_FRAMES,
    context: int = LEFT_CONTEXT,
    max_waste: float = MAX_WASTE,
    join_waste: float = 0.0,
) -> list[Window]:
    """The windows that decode rows of these lengths (frames), chunk by chunk, over the rows in
    longest-first order. Chunk boundaries are absolute frame indices, as in the official decode,
    so a row gets the chunks it would get alone; a row leaves after its last chunk. join_waste:
    how much padding a row may take to join a longer row's run (0: runs of one bucket)."""
    _table(chunk, context, max_waste)  # checks the arguments, even with no rows
    if join_waste < 0:
        raise ValueError("vocoder windows: join_waste must be >= 0")
    ordered = sorted(lengths, reverse=True)
    windows = []
    for start in range(0, ordered[0] if ordered else 0, chunk):
        ctx = min(context, start)  # fewer only when a chunk is shorter than the context
        needs = [ctx + min(chunk, n - start) for n in ordered if n > start]  # a prefix
        own = [bucket_frames(n, chunk, context, max_waste) for n in needs]
        first = 0
        for run in joined_runs(needs, own, join_waste):  # the buckets never grow
            for rows in batch_pieces(run):
                kept = min(chunk, ordered[first] - start)  # ordered[first]: the piece's longest
                windows.append(
                    Window(
                        first_row=first,
                        rows=rows,
                        start=start,
                        context=ctx,
                        kept=kept,
                        frames=own[first],  # the piece's longest row's bucket
                    )
                )
                first += rows
    return windows


def padding_waste(
    lengths: Sequence[int],
    chunk: int = CHUNK_FRAMES,
    context: int = LEFT_CONTEXT,
    max_waste: float = MAX_WASTE,
    join_waste: float = 0.0,
) -> float:
    """(decoded - needed) / needed frames of decoding rows of these lengths together, where a
    row's window needs its context and its kept frames (the official chunking decodes the
    context too: not padding). 0.0 when nothing is needed."""
    ordered = sorted(lengths, reverse=True)
    decoded = needed = 0
    for w in cut_windows(lengths, chunk, context, max_waste, join_waste):
        decoded += w.rows * w.frames
        piece = ordered[w.first_row : w.first_row + w.rows]  # rows in a piece differ in length
        needed += sum(w.context + min(chunk, n - w.start) for n in piece)
    return (decoded - needed) / needed if needed else 0.0


@torch.inference_mode()
def decode_bucketed(
    decoder: SpeechDecoder,
    codes: list[torch.Tensor],
    forward: Forward | None = None,
    chunk: int = CHUNK_FRAMES,
    context: int = LEFT_CONTEXT,
    max_waste: float = MAX_WASTE,
    join_waste: float = 0.0,
) -> list[torch.Tensor]:
    """Decode utterances (each codes [T_i, Q]) -> float32 audio [T_i * up], each window through
    `forward` (the decoder itself, or its graphs: qtts.core.engine.vocoder.vocoder_graphs). A
    window's audio is copied out before the next call, so forward may return a buffer it reuses.
    Padded frames and negative codes decode as code 0, as in the official decode."""
    q, up = decoder.cfg.num_quantizers, decoder.cfg.upsample
    for i, c in enumerate(codes):
        if c.dim() != 2 or c.shape[1] != q:
            raise ValueError(f"decode_bucketed: codes[{i}] must be [frames, {q}], got {c.shape}")
    forward = forward or decoder
    device = next(decoder.parameters()).device
    lengths = [int(c.shape[0]) for c in codes]
    order = longest_first(lengths)
    windows = cut_windows(lengths, chunk, context, max_waste, join_waste)
    width = max((w.start - w.context + w.frames for w in windows), default=0)
    batch = torch.zeros(len(codes), q, width, dtype=torch.long, device=device)  # [B, Q, T]
    for j, i in enumerate(order):
        batch[j, :, : lengths[i]] = codes[i].to(device=device, dtype=torch.long).clamp(min=0).T
    audio = torch.zeros(len(codes), max(lengths, default=0) * up, device=device)  # [B, S] fp32
    for w in windows:
        rows, first = slice(w.first_row, w.first_row + w.rows), w.start - w.context
        wav = forward(batch[rows, :, first : first + w.frames])  # [rows, frames * up]
        kept = wav[:, w.context * up : (w.context + w.kept) * up]
        audio[rows, w.start * up : (w.start + w.kept) * up] = kept  # copied out (and to fp32)
    at = {i: j for j, i in enumerate(order)}
    return [audio[at[i], : n * up] for i, n in enumerate(lengths)]
