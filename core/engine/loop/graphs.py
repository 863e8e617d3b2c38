"""CUDA graphs for the engine's decode step: one per KV view length, all captured before decoding.

A decode step launches thousands of small kernels (talker layers, 15 predictor passes, sampling);
replaying them as one graph removes the launch overhead that otherwise dominates at small batch.
Every input the step reads lives in the engine's persistent SlotState, so a graph needs no input
copies: the host loop picks the graph for the current view length and replays it.

Every graph a pass can need (qtts.core.engine.step.views.view_lengths: a bounded set, at most
max_len / view_bucket) is captured up front, largest view first, into one shared memory pool (the
graphs never run concurrently and keep no outputs; the largest sizes the pool and the rest reuse
it), as nano-vllm does. Capturing mid-run would race the vocoder thread: under the default global
capture mode, another thread's allocation or copy invalidates the capture. So the caller captures
before its first prefill while holding the device gate that the vocoder holds around each of its
calls (core/synthesis/device_gate.py).

A capture that runs out of memory raises torch.OutOfMemoryError (the synthesizer's retry halves the
slots); any other failure raises GraphCaptureError naming the view. Either way every graph of the
pass is dropped and the slot state is put back as it was. The eager twin is Engine.decode_step,
and `EagerGraphs` replays through it (CPU tests of this module); tests/gpu ties graphs to eager.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import SimpleNamespace

import torch

from qtts.core.engine.loop.engine import Engine

Step = Callable[[int], None]  # Engine.decode_step(view_len)
# Small per-slot tensors a decode step changes. Warm-up runs real steps, so these are saved and
# restored around it; the KV and code buffers need no restore (the next real step rewrites the same
# positions, since lengths and counters are restored).
MUTATED_STATE = ("c0", "past_hidden", "num_tokens", "finished", "hit_budget", "num_frames", "seen")


class GraphCaptureError(RuntimeError):
    pass


# A capture that fails for another reason than memory can leave the caching allocator believing
# a capture is still under way (pytorch#180395): a later empty_cache() then trips an internal
# assert. So the first such failure turns graphs off for the rest of the process (decode and
# vocoder alike) and stops every later empty_cache(); out of memory is not one (the retries free
# memory and try again, smaller).
_capture_broken: str | None = None


def mark_capture_broken(error: BaseException) -> None:
    """Record the first capture failure that was not out of memory (see above)."""
    global _capture_broken
    if _capture_broken is None:
        _capture_broken = str(error).splitlines()[0] if str(error) else type(error).__name__


def capture_broken() -> str | None:
    """Why graphs are off for this process (a failed capture), or None."""
    return _capture_broken


class CudaGraphs:
    """The capture backend on CUDA: warm-up on a side stream, capture into one shared pool. Its
    streams are made on the engine's device explicitly (torch.cuda.graph's default capture stream
    is made once per process, on whichever device was current then). capture_error_mode
    "thread_local" lets other threads keep working during a capture (the vocoder captures on its
    own thread while the decode loop runs); "global" (the decode step's) stops them. `stream`:
    warm up and capture there instead of on a fresh side stream; a graph's kernels keep the
    context of the stream they were captured on, so a green context's SM limit holds in replay
    only for graphs captured on its stream."""

    def __init__(
        self,
        device: torch.device,
        capture_error_mode: str = "global",
        stream: torch.cuda.Stream | None = None,
    ):
        self.device, self.capture_error_mode = device, capture_error_mode
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = stream if stream is not None else torch.cuda.Stream(device)

    def warmup(self, step: Step, view_len: int, steps: int) -> None:
        # Lazy inits, Triton compilation and cuBLAS workspaces happen here, outside any capture.
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            for _ in range(steps):
                step(view_len)
        current.wait_stream(self.stream)

    def settle(self) -> None:
        """Before a batch of captures: the device idle and the allocator's cache returned, so the
        graphs' pool takes what the warm-ups held. Once per batch, never per graph: torch's
        `graph` context does both on every capture, and a sync plus an emptied cache per window
        shape made the speech decoder's ~130 captures a large part of a job's start-up."""
        torch.cuda.synchronize(self.device)
        if capture_broken() is None:  # after a failed capture, empty_cache may trip an assert
            torch.cuda.empty_cache()

    def capture(self, step: Step, view_len: int) -> torch.cuda.CUDAGraph:
        """A graph of one step(view_len) call. No device sync and no emptied cache (see settle):
        so the vocoder thread can capture a window shape the first time it meets one while the
        decode loop's stream keeps running."""
        graph = torch.cuda.CUDAGraph()
        device, stream = torch.cuda.current_device(), torch.cuda.current_stream(self.device)
        try:
            with torch.cuda.stream(self.stream):
                graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
                try:
                    step(view_len)
                finally:
                    graph.capture_end()  # also after a failed step: the capture must end
        except BaseException:
            # A failed capture_end leaves the capture stream (and its device) current: the context
            # exits before restoring them. Put the caller's back so later work does not land there.
            torch.cuda.set_stream(stream)
            torch.cuda.set_device(device)
            raise
        return graph


class EagerGraphs:
    """The twin backend: a "graph" runs the step eagerly. Lets CPU tests drive the capture
    order, the error paths and the host loop's use of graphs without a GPU."""

    def warmup(self, step: Step, view_len: int, steps: int) -> None:
        for _ in range(steps):
            step(view_len)

    def settle(self) -> None:
        pass

    def capture(self, step: Step, view_len: int) -> SimpleNamespace:
        return SimpleNamespace(replay=lambda: step(view_len))


def default_backend(engine: Engine) -> CudaGraphs:
    if engine.tts_pad.device.type != "cuda":
        raise ValueError("CUDA graphs need the engine on a CUDA device")
    return CudaGraphs(engine.tts_pad.device)


class GraphedDecodeStep:
    """Callable like Engine.decode_step(view_len), replaying the graph captured for view_len."""

    def __init__(self, engine: Engine, view_lens: Iterable[int], backend=None, warmup_steps=2):
        backend = backend or default_backend(engine)
        self.engine, self.backend = engine, backend
        self.graphs: dict[int, object] = {}
        views = sorted(set(view_lens), reverse=True)  # largest first: it sizes the shared pool
        state = engine.state
        saved = {name: getattr(state, name).clone() for name in MUTATED_STATE}
        saved_lengths = state.kv.lengths.clone()
        view, phase = views[0], "warm-up"
        try:
            # Every view runs eagerly before any capture: setup that happens on a shape's first
            # call (a cuDNN attention plan, a Triton specialization) must not first run inside one.
            for view in views:
                backend.warmup(engine.decode_step, view, warmup_steps if view == views[0] else 1)
            self._restore(saved, saved_lengths)
            phase = "capture"
            backend.settle()
            for view in views:
                self.graphs[view] = backend.capture(engine.decode_step, view)
        except Exception as e:
            self.graphs.clear()
            try:
                self._restore(saved, saved_lengths)
            except Exception:  # the device may be unusable; the caller discards this pass anyway
                pass
            if is_out_of_memory(e):
                raise torch.OutOfMemoryError(f"out of memory capturing decode graphs: {e}") from e
            mark_capture_broken(e)
            raise GraphCaptureError(
                f"CUDA graph {phase} failed at KV view {view}: {e} "
                "(QTTS_CUDA_GRAPHS=0 runs the GPU without graphs)"
            ) from e

    def __call__(self, view_len: int) -> None:
        graph = self.graphs.get(view_len)
        if graph is None:  # a bug: the host loop asked for a view nobody captured
            raise GraphCaptureError(f"no decode graph for KV view {view_len}")
        graph.replay()

    def _restore(self, saved: dict, saved_lengths: torch.Tensor) -> None:
        state = self.engine.state
        for name, value in saved.items():
            getattr(state, name).copy_(value)
        state.kv.lengths.copy_(saved_lengths)


def is_out_of_memory(error: BaseException | None) -> bool:
    """An OOM anywhere in the chain: a failed capture often surfaces as the capture-end error,
    with the allocator's OutOfMemoryError as its context."""
    while error is not None:
        if isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower():
            return True
        error = error.__cause__ or error.__context__
    return False
