"""The speech decoder's fast path: every call it makes has one of a few shapes (docs/model.md,
"Speech decoder").

The official decode (core/model/codec.py `decode_utterances`, the twin kept for reference) runs a
group of rows in 300-frame chunks, each after the first with 25 frames of left context, so the
last chunk's length and the row count follow the data: every new shape is a new CUDA graph (on
CPU, oneDNN's setup for a new shape: seen to make a first call take seconds). Here each call is
a window [rows, Q, frames] where
- frames is a bucket: context + kept frames rounded up to a multiple of FRAME_STEP, capped at
  chunk + context (13 lengths, 25 .. 325). Only a row's last window is ever short, so padding
  adds at most FRAME_STEP - 1 = 24 frames (1.9 s of audio) to a row: under 8% of a full window.
- rows is a power of two: the rows still decoding, longest first, are decoded together when
  their windows fall in the same bucket, in power-of-two pieces (11 rows: 8 + 2 + 1), never
  padded with dummy rows. A dummy row, or a short row padded to a long one (the official decode
  pads every row of a group to the longest), costs a row's activations (the decoder is bound by
  activation traffic, ~1.3 GB per audio-second in bf16); one more call costs one more read of
  its weights (0.2 GB, about two frames of one row).
Everything in the decoder is causal (left-padded convolutions, transposed convolutions trimmed
on the right, attention masked to earlier positions), so frames after a row's end change no
sample before it, and rows never mix: each kept sample is what the official decode computes, to
float rounding. Knows the decoder's shapes; nothing of graphs, text or files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby

import torch

from qtts.core.model.codec import SpeechDecoder

CHUNK_FRAMES = 300  # frames a window keeps (the official chunk)
LEFT_CONTEXT = 25  # frames decoded again before each chunk after the first, their audio dropped
# Window lengths are multiples of this: 2 s of audio, and the left context itself, so first and
# later windows share one set of lengths.
FRAME_STEP = 25

Forward = Callable[[torch.Tensor], torch.Tensor]  # codes [rows, Q, frames] -> [rows, frames * up]


@dataclass(frozen=True)
class Window:
    first_row: int  # rows first_row .. first_row + rows - 1 of the longest-first order
    rows: int  # a power of two
    start: int  # first frame whose audio is kept
    context: int  # frames before start decoded again, their audio dropped
    kept: int  # frames kept from start on (the piece's longest row, at most a chunk)
    frames: int  # frames decoded: a bucket >= context + kept


def bucket_frames(n: int, longest: int, step: int = FRAME_STEP) -> int:
    """n frames rounded up to a multiple of step, at most `longest` (chunk + context)."""
    return min(-(-n // step) * step, longest)


def frame_buckets(chunk: int = CHUNK_FRAMES, context: int = LEFT_CONTEXT,
                  step: int = FRAME_STEP) -> list[int]:  # fmt: skip
    longest = chunk + context
    return sorted({bucket_frames(n, longest, step) for n in range(1, longest + 1)})


def batch_pieces(rows: int) -> list[int]:
    """rows as powers of two, largest first (its binary digits): 11 -> [8, 2, 1]."""
    return [1 << bit for bit in range(rows.bit_length() - 1, -1, -1) if rows >> bit & 1]


def bucket_shapes(max_rows: int, chunk: int = CHUNK_FRAMES, context: int = LEFT_CONTEXT,
                  step: int = FRAME_STEP) -> set[tuple[int, int]]:  # fmt: skip
    """Every (rows, frames) a group of up to max_rows can be decoded with."""
    sizes = [1 << i for i in range(max_rows.bit_length())]
    return {(b, f) for b in sizes for f in frame_buckets(chunk, context, step)}


def longest_first(lengths: Sequence[int]) -> list[int]:
    """Row indices by length, longest first (ties keep their order). The rows still decoding at
    any frame are then a prefix of it, so every window is a contiguous slice of rows."""
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])


def plan_windows(lengths: Sequence[int], chunk: int = CHUNK_FRAMES, context: int = LEFT_CONTEXT,
                 step: int = FRAME_STEP) -> list[Window]:  # fmt: skip
    """The windows that decode rows of these lengths (frames), chunk by chunk, over the rows in
    longest-first order. Chunk boundaries are absolute frame indices, as in the official decode,
    so a row gets the chunks it would get alone; a row leaves after its last chunk."""
    if chunk < 1 or context < 0 or step < 1:
        raise ValueError("vocoder windows: need chunk >= 1, context >= 0 and step >= 1")
    ordered = sorted(lengths, reverse=True)
    windows = []
    for start in range(0, ordered[0] if ordered else 0, chunk):
        ctx = min(context, start)  # fewer only when a chunk is shorter than the context
        active = [n for n in ordered if n > start]  # a prefix of the order
        own = [bucket_frames(ctx + min(chunk, n - start), chunk + context, step) for n in active]
        first = 0
        for frames, same in groupby(own):  # runs of one bucket: the buckets never grow
            for rows in batch_pieces(len(list(same))):
                kept = min(chunk, ordered[first] - start)  # ordered[first]: the piece's longest
                windows.append(Window(first, rows, start, ctx, kept, frames))
                first += rows
    return windows


@torch.inference_mode()
def decode_bucketed(
    decoder: SpeechDecoder,
    codes: list[torch.Tensor],
    forward: Forward | None = None,
    chunk: int = CHUNK_FRAMES,
    context: int = LEFT_CONTEXT,
    step: int = FRAME_STEP,
) -> list[torch.Tensor]:
    """Decode utterances (each codes [T_i, Q]) -> float32 audio [T_i * up], each window through
    `forward` (the decoder itself, or its graphs: qtts.core.engine.vocoder_graphs). A window's
    audio is copied out before the next call, so forward may return a buffer it reuses.
    Padded frames and negative codes decode as code 0, as in the official decode."""
    q, up = decoder.cfg.num_quantizers, decoder.cfg.upsample
    for i, c in enumerate(codes):
        if c.dim() != 2 or c.shape[1] != q:
            raise ValueError(f"decode_bucketed: codes[{i}] must be [frames, {q}], got {c.shape}")
    forward = forward or decoder
    device = next(decoder.parameters()).device
    lengths = [int(c.shape[0]) for c in codes]
    order = longest_first(lengths)
    windows = plan_windows(lengths, chunk, context, step)
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
