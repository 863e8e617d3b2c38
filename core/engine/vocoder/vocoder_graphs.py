"""CUDA graphs for the speech decoder: one per window shape, captured on the vocoder's thread the
first time a shape is decoded (or all up front by `capture_all`, QTTS_VOCODER_CAPTURE=ahead).

A window (qtts.core.engine.vocoder.vocoder_windows) launches a few hundred kernels; replayed as one
graph they cost the GPU no launch gaps and the vocoder thread almost no Python, which it would
otherwise take from the decode loop's thread (they share the interpreter). Shapes come from a
fixed bucket set (at most 26 lengths x 5 row counts with the planner's 16 rows: `qtts plan`
reports the count), and a job meets only the shapes its rows' lengths make, so each is captured
when first met: a shape's first call runs eagerly on the capture stream, into the static buffers
(its warm-up, and its result is used), then its graph is captured. A capture neither syncs the
device nor empties the allocator's cache (engine.graphs.CudaGraphs.capture), so it does not
drain the decode loop's stream. (Before, all ~130 shapes were captured ahead of a job's first
decode step, each after a sync and an emptied cache, whatever shapes its rows needed.) A window
of more rows x frames than `graph_max` (QTTS_VOCODER_GRAPH_MAX) runs eagerly: its device time
hides its launches. Every graph reads one static codes buffer and writes one static audio
buffer (slices of them), sized once for the plan's vocoder batch, so the graphs share one memory
pool; the largest graphed shape is captured first, so the pool is sized by it and smaller shapes
reuse its blocks.

The vocoder runs on a worker thread holding the synthesizer's device gate around each call
(core/synthesis/device_gate.py), so no decode-graph capture runs beside these; its captures are
"thread_local" so the decode loop's own work and allocations on the main thread go on. Graphs
are speed, never the job: a capture that fails for another reason than memory is logged once,
the graphs are dropped and the decoder runs eagerly from then on, as every engine does
(engine.graphs.capture_broken). Out of memory anywhere here raises for the synthesizer's retry,
which halves the rows per call and reserves that size, so the graphs come back smaller. The
eager twin is the decoder itself (`decode_bucketed` without graphs); CPU tests drive this class
with a recording backend.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import torch

from qtts.core.engine.loop.graphs import (
    CudaGraphs,
    capture_broken,
    is_out_of_memory,
    mark_capture_broken,
)
from qtts.core.engine.vocoder.vocoder_windows import CHUNK_FRAMES, LEFT_CONTEXT
from qtts.core.model.codec import SpeechDecoder

log = logging.getLogger("qtts")


class GraphedVocoder:
    """Callable like the decoder on a window: codes [rows, Q, frames] -> audio [rows, frames * up],
    rows <= `rows` (the plan's vocoder batch). The result is a view of the static audio buffer,
    valid until the next call (the caller copies it out, as decode_bucketed does)."""

    def __init__(
        self,
        decoder: SpeechDecoder,
        rows: int,
        backend=None,
        max_frames: int = CHUNK_FRAMES + LEFT_CONTEXT,
        capture_stream: torch.cuda.Stream | None = None,
        graph_max: int | None = None,
    ):
        self.decoder, self.max_frames, self.graph_max = decoder, max_frames, graph_max
        self.rows = max(1, rows)
        self._given_backend = backend  # tests; None: a CudaGraphs (a fresh pool) per start
        # Where the graphs are captured (None: a side stream of their own). The vocoder's stream
        # when it is a green context's: captured elsewhere, its graphs would replay on every SM.
        self.capture_stream = capture_stream
        self.backend = None
        self.graphs: dict[tuple[int, int], object] = {}  # (rows, frames) -> graph
        self.static_codes: torch.Tensor | None = None  # [rows, Q, max_frames] int64
        self.static_audio: torch.Tensor | None = None  # [rows, max_frames * up], decoder dtype
        # Why this vocoder runs without graphs, or None: "memory" (even one row's graphs did not
        # fit; a new size re-arms them) or "broken" (a capture failed: for good).
        self.off: str | None = None
        # One-time work, for the synthesizer's clock: graphs captured over this vocoder's life
        # and the seconds their captures (and the first shape's warm-up) took on this thread.
        self.captures, self.capture_s = 0, 0.0

    @property
    def eager(self) -> bool:
        """No graphs: the decoder runs as it is."""
        return self.off is not None

    def reserve(self, rows: int) -> None:
        """Windows of up to `rows` rows from now on. Called with no vocoder work in flight (the
        synthesizer does, between calls); a new size drops the graphs, their buffers and pool,
        so the memory held is what the new plan counts."""
        if max(1, rows) != self.rows:
            self.drop()
            self.rows = max(1, rows)
            if self.off == "memory":  # a new size may fit
                self.off = None

    def __call__(self, codes: torch.Tensor) -> torch.Tensor:
        if self.off is None and capture_broken() is not None:  # another capture of the process
            self.drop()
            self.off = "broken"
        if self.eager:
            return self.decoder(codes)
        rows, _, frames = codes.shape
        if not self.graphed(rows, frames):
            return self.decoder(codes)
        if rows > self.rows or frames > self.max_frames:
            raise ValueError(
                f"vocoder window {rows} x {frames} outside the reserved "
                f"{self.rows} x {self.max_frames}"
            )
        graph = self.graphs.get((rows, frames))
        if graph is None:
            return self._first_call(codes)
        self.static_codes[:rows, :, :frames].copy_(codes)
        graph.replay()
        return self._audio(rows, frames)

    @torch.inference_mode()
    def capture_all(self, shapes: Iterable[tuple[int, int]], device: torch.device) -> None:
        """Capture now every window shape a plan may need that fits the reservation and is
        graphed, largest first, each through its usual first call on zero codes. The synthesizer
        calls this before decoding starts, holding the device gate, only with
        QTTS_VOCODER_CAPTURE=ahead (the start-up it costs, against lazy capture)."""
        q = self.decoder.cfg.num_quantizers
        for rows, frames in sorted(shapes, reverse=True):
            if self.eager or capture_broken() is not None:
                return
            if (
                rows <= self.rows
                and frames <= self.max_frames
                and self.graphed(rows, frames)
                and (rows, frames) not in self.graphs
            ):
                self(torch.zeros(rows, q, frames, dtype=torch.long, device=device))

    def graphed(self, rows: int, frames: int) -> bool:
        """Whether a window of this shape replays a graph (when graphs are on): every shape, or
        those of at most graph_max rows x frames."""
        return self.graph_max is None or rows * frames <= self.graph_max

    def drop(self) -> None:
        """Forget every graph, the static buffers and the backend (its pool goes with them)."""
        self.graphs.clear()
        self.static_codes = self.static_audio = self.backend = None

    def _audio(self, rows: int, frames: int) -> torch.Tensor:
        return self.static_audio[:rows, : frames * self.decoder.cfg.upsample]

    def _window(self, key: tuple[int, int]) -> None:
        """What a graph replays: the decoder on the static codes, into the static audio."""
        rows, frames = key
        audio = self.decoder(self.static_codes[:rows, :, :frames])  # [rows, frames * up]
        self.static_audio[:rows, : audio.shape[1]].copy_(audio)

    def _first_call(self, codes: torch.Tensor) -> torch.Tensor:
        """The shape's eager run (on the capture stream, where lazy setup such as a cuBLAS
        workspace then lives outside any graph's pool), then its capture. Before the first: the
        buffers, and the largest shape warmed and captured, so that it sizes the pool."""
        rows, _, frames = codes.shape
        key = (rows, frames)
        if self.backend is None:
            try:
                largest = self._start(codes.device)
            except Exception as e:
                self._failed((self.rows, self.max_frames), e)
                return self.decoder(codes)
            if key == largest:
                return self(codes)
        try:
            self.static_codes[:rows, :, :frames].copy_(codes)
            self.backend.warmup(self._window, key, 1)
        except Exception as e:
            self._failed(key, e)
            return self.decoder(codes)
        audio = self._audio(rows, frames)  # this call's result: kept alive if the capture fails
        start = time.perf_counter()
        try:
            self.graphs[key] = self.backend.capture(self._window, key)
            self.captures += 1
        except Exception as e:
            self._failed(key, e)
        self.capture_s += time.perf_counter() - start
        return audio

    def _start(self, device: torch.device) -> tuple[int, int]:
        """Static buffers for `rows` rows, a backend, and the largest shape warmed and captured
        (its key returned)."""
        q, up = self.decoder.cfg.num_quantizers, self.decoder.cfg.upsample
        dtype = next(self.decoder.parameters()).dtype  # the decoder's output dtype
        self.static_codes = torch.zeros(
            self.rows, q, self.max_frames, dtype=torch.long, device=device
        )
        self.static_audio = torch.zeros(self.rows, self.max_frames * up, dtype=dtype, device=device)
        self.backend = self._given_backend or CudaGraphs(
            device, capture_error_mode="thread_local", stream=self.capture_stream
        )
        largest = self._largest()
        start = time.perf_counter()
        self.backend.warmup(self._window, largest, 1)
        self.graphs[largest] = self.backend.capture(self._window, largest)
        self.captures += 1
        self.capture_s += time.perf_counter() - start
        return largest

    def _largest(self) -> tuple[int, int]:
        """The graphed shape of the most rows x frames: captured first, it sizes the pool."""
        rows = 1 << (self.rows.bit_length() - 1)
        if self.graph_max is None:
            return rows, self.max_frames
        while rows > 1 and rows > self.graph_max:
            rows //= 2
        return rows, max(1, min(self.max_frames, self.graph_max // rows))

    def _failed(self, key: tuple[int, int], error: Exception) -> None:
        """Out of memory raises for the synthesizer's retry, which halves the rows per call and
        reserves that size here (the graphs re-armed, smaller); at one row there is nothing
        smaller, so this vocoder decodes without graphs until a new size is reserved. Any other
        failure turns graphs off for the process (engine.graphs.mark_capture_broken)."""
        self.drop()
        memory = is_out_of_memory(error)
        if memory and self.rows > 1:
            rows, frames = key
            raise torch.OutOfMemoryError(
                f"out of memory in a vocoder window ({rows} rows x {frames} frames): {error}"
            ) from error
        if not memory:
            mark_capture_broken(error)
        self.off = "memory" if memory else "broken"
        log.warning(
            "vocoder CUDA graph capture failed at %d rows x %d frames (%s); the speech "
            "decoder runs without graphs from here on",
            *key,
            error,
        )
