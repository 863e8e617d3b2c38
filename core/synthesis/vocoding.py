"""The speech decoder beside the engine passes, for the synthesizer and `qtts bench` alike: its
kernels and window graphs (replayed where decode steps replay theirs; each shape captured as
first met, or all ahead with QTTS_VOCODER_CAPTURE=ahead), the rows per call (halved on out of
memory), the device gate per call, and its work counted on the driver's clock. Knows codes,
audio and the driver; no requests, no text, no files.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext

import numpy as np
import torch

from qtts.core.engine.vocoder.decoder_kernels import with_kernels
from qtts.core.engine.vocoder.vocoder_graphs import GraphedVocoder
from qtts.core.engine.vocoder.vocoder_windows import JOIN_WASTE, bucket_shapes, decode_bucketed
from qtts.core.synthesis.engine_driver import EngineDriver
from qtts.core.synthesis.oom_backoff import OomBackoff

log = logging.getLogger("qtts")


class Vocoding:
    def __init__(self, decoder, driver: EngineDriver, rows: int):
        self.driver, self.device, tuning = driver, driver.device, driver.tuning
        self.decoder = with_kernels(
            decoder, gemm=tuning.decoder_gemm, choices=tuning.decoder_conv_choices
        )
        self.graphed = None
        if tuning.cuda_graphs:  # captured on the vocoder's stream when it holds part of the SMs
            split = driver.vocoder_stream if tuning.vocoder_sms else None  # (or replay ignores it)
            self.graphed = GraphedVocoder(
                self.decoder, rows, capture_stream=split, graph_max=tuning.vocoder_graph_max
            )
        self.rows = self._backoff(rows)  # rows per call

    def plan(self, rows: int) -> None:
        """`rows` per call from now on (a memory plan's vocoder batch), with no vocoder work in
        flight: the graphs re-armed at that size and, with QTTS_VOCODER_CAPTURE=ahead, captured."""
        self.rows = self._backoff(rows)
        if self.graphed is not None:
            self.graphed.reserve(rows)
            if self.driver.tuning.vocoder_capture == "ahead":
                self._capture_ahead()

    def in_micro_batches(self, group: list, decode: Callable[[list], Iterable]) -> list:
        """decode(batch) over `group`, at most `rows.size` rows a call, each call holding the
        device gate (a capture or a build on the decode side waits for one call at most:
        device_gate.py). Out of memory halves the rows and redoes only those not decoded yet
        (the decode is deterministic)."""
        clock, gate = self.driver.clock, self.driver.gate
        done, out, start = 0, [], time.perf_counter()
        captured_s = self.graphed.capture_s if self.graphed is not None else 0.0
        for attempt in self.rows.tries(
            lambda: done < len(group),  # noqa: B023 (the rows decoded so far, read each try)
            gate=gate.yielding,
        ):
            batch = group[done : done + attempt.size]
            attempt.rows = len(batch)
            with gate.yielding(), attempt:
                decoded = list(decode(batch))
            if not attempt.failed:
                done += len(batch)
                out += decoded
        clock.vocoder_s += time.perf_counter() - start
        if self.graphed is not None:  # the shapes this group met first: captured on this thread
            clock.vocoder_first_met_s += self.graphed.capture_s - captured_s
            clock.vocoder_graphs = self.graphed.captures
        return out

    def decode(self, codes: list[torch.Tensor]) -> list[np.ndarray]:
        """Each row's codes [F, G] -> its float32 audio on the host, through the windows (rows
        joined on a GPU: QTTS_VOCODER_JOIN), each window counted."""
        join = JOIN_WASTE if self.driver.tuning.vocoder_join else 0.0
        forward = self.driver.clock.counting_window(self.graphed or self.decoder)
        codes_on = [c.to(self.device) for c in codes]
        audio = decode_bucketed(self.decoder, codes_on, forward, join_waste=join)
        return [wav.float().cpu().numpy() for wav in audio]

    def _backoff(self, size: int) -> OomBackoff:
        """A halving re-arms the graphs at the new size. No gate of its own: the vocoder holds
        the device gate around its halving and freeing."""
        reserve = self.graphed.reserve if self.graphed is not None else None
        return OomBackoff(size, what="vocoder rows", device=self.device, on_shrink=reserve)

    def _capture_ahead(self) -> None:
        """Every window shape of the planned rows, before decoding starts, holding the device
        gate; out of memory halves the rows per call, as it does while vocoding."""
        clock, gate, captured = self.driver.clock, self.driver.gate, []
        start, before = time.perf_counter(), len(self.graphed.graphs)
        for attempt in self.rows.tries(lambda: not captured, gate=lambda: gate):
            with attempt, gate, self._on_vocoder_stream():
                self.graphed.capture_all(bucket_shapes(attempt.rows), self.device)
                captured.append(True)
        took = time.perf_counter() - start
        clock.vocoder_capture_s += took
        if len(self.graphed.graphs) > before:
            n = len(self.graphed.graphs) - before
            log.info("vocoder: %d window graphs captured in %.1f s", n, took)

    def _on_vocoder_stream(self):
        """The vocoder's stream, after the current one: its static buffers belong to the stream
        that uses them, so freeing them (a new reservation) never races the decode stream."""
        stream = self.driver.vocoder_stream
        if stream is None:
            return nullcontext()
        stream.wait_stream(torch.cuda.current_stream(self.device))
        return torch.cuda.stream(stream)
