"""CUDA graphs for the speech decoder: one per window shape, captured the first time that shape
is decoded, on the vocoder's thread.

A window (qtts.core.engine.vocoder_windows) launches a few hundred kernels; replayed as one graph
they cost the GPU no launch gaps and the vocoder thread almost no Python, which it would
otherwise take from the decode loop's thread (they share the interpreter). Shapes come from a
fixed bucket set (at most 13 lengths x 5 row counts with the planner's 16 rows), so the graphs
are few and captured lazily: a shape's first call runs eagerly (its warm-up, and its result is
used), then its graph is captured. Every graph reads one static codes buffer and writes one
static audio buffer (slices of them), as nano-vllm does, so the graphs share one memory pool and
the buffers' size is one window of the largest row count.

The vocoder runs on a worker thread holding the synthesizer's device gate (core/synthesis/
decode_overlap.py), so no decode-graph capture runs beside these; its captures are
"thread_local" so the decode loop's own work and allocations on the main thread go on. A capture
that fails for any reason but memory is logged once and the decoder runs eagerly from then on
(speed, not the job); out of memory drops every graph and raises torch.OutOfMemoryError for the
synthesizer's retry, which halves the rows per call. The eager twin is the decoder itself
(`decode_bucketed` without graphs); CPU tests drive this class with a recording backend.
"""

from __future__ import annotations

import logging

import torch

from qtts.core.engine.graphs import CudaGraphs, is_out_of_memory
from qtts.core.engine.vocoder_windows import CHUNK_FRAMES, LEFT_CONTEXT
from qtts.core.model.codec import SpeechDecoder

log = logging.getLogger("qtts")


class GraphedVocoder:
    """Callable like the decoder on a window: codes [rows, Q, frames] -> audio [rows, frames * up].
    A replay returns a view of the static audio buffer, valid until the next call (the caller
    copies it out, as decode_bucketed does)."""

    def __init__(self, decoder: SpeechDecoder, backend=None,
                 max_frames: int = CHUNK_FRAMES + LEFT_CONTEXT):  # fmt: skip
        self.decoder, self.backend, self.max_frames = decoder, backend, max_frames
        self.graphs: dict[tuple[int, int], object] = {}  # (rows, frames) -> graph
        self.static_codes: torch.Tensor | None = None  # [R, Q, max_frames] int64
        self.static_audio: torch.Tensor | None = None  # [R, max_frames * up], decoder dtype
        self.eager = False  # a capture failed: no graphs from then on

    def __call__(self, codes: torch.Tensor) -> torch.Tensor:
        if self.eager:
            return self.decoder(codes)
        rows, _, frames = codes.shape
        graph = self.graphs.get((rows, frames))
        if graph is None:
            audio = self.decoder(codes)  # this shape's warm-up, outside any capture
            self._capture(rows, frames, audio)
            return audio
        self.static_codes[:rows, :, :frames].copy_(codes)
        graph.replay()
        return self.static_audio[:rows, : frames * self.decoder.cfg.upsample]

    def drop(self) -> None:
        """Forget every graph and the static buffers (their pool is freed with them)."""
        self.graphs.clear()
        self.static_codes = self.static_audio = None

    def _window(self, key: tuple[int, int]) -> None:
        """What a graph replays: the decoder on the static codes, into the static audio."""
        rows, frames = key
        audio = self.decoder(self.static_codes[:rows, :, :frames])  # [rows, frames * up]
        self.static_audio[:rows, : audio.shape[1]].copy_(audio)

    def _capture(self, rows: int, frames: int, like: torch.Tensor) -> None:
        try:
            self._buffers(rows, frames, like)
            if self.backend is None:
                device = self.static_codes.device
                self.backend = CudaGraphs(device, capture_error_mode="thread_local")
            self.graphs[(rows, frames)] = self.backend.capture(self._window, (rows, frames))
        except Exception as e:
            self.drop()
            if is_out_of_memory(e):
                raise torch.OutOfMemoryError(
                    f"out of memory capturing a vocoder graph ({rows} rows x {frames} frames): {e}"
                ) from e
            self.eager = True
            log.warning(
                "vocoder CUDA graph capture failed at %d rows x %d frames (%s); the speech "
                "decoder runs without graphs from here on", rows, frames, e,
            )  # fmt: skip

    def _buffers(self, rows: int, frames: int, like: torch.Tensor) -> None:
        """Static buffers for `rows` (rounded up to a power of two) on `like`'s device, audio in
        its dtype; made larger only when a call needs more rows than any before, which drops the
        graphs made over the old ones."""
        if frames > self.max_frames:
            raise ValueError(f"vocoder window of {frames} frames > {self.max_frames}")
        if self.static_codes is not None and self.static_codes.shape[0] >= rows:
            return
        self.drop()
        q, up = self.decoder.cfg.num_quantizers, self.decoder.cfg.upsample
        capacity = 1 << (rows - 1).bit_length()
        self.static_codes = torch.zeros(capacity, q, self.max_frames, dtype=torch.long,
                                        device=like.device)  # fmt: skip
        self.static_audio = torch.zeros(capacity, self.max_frames * up, dtype=like.dtype,
                                        device=like.device)  # fmt: skip
