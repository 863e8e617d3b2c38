"""The speech decoder's graphs (qtts.core.engine.vocoder.vocoder_graphs), driven on CPU by a backend
that stands in for CUDA graphs: the largest shape is captured first, each window shape runs eagerly
once (its warm-up) right before its capture, one graph per shape, replays read the static codes
and their audio is copied out before the next replay (the audio equals the eager decode); a
capture that fails for another reason than memory falls back to eager with one warning, keeps
the call's audio and turns graphs off for the process, while out of memory anywhere drops the
graphs and raises for the synthesizer's retry, after which a smaller reservation re-arms them."""

import logging
from types import SimpleNamespace

import pytest
import torch
from tiny_models import fast_tiny_decode, tiny_decoder

from qtts.core.engine.loop.graphs import capture_broken
from qtts.core.engine.vocoder import vocoder_graphs
from qtts.core.engine.vocoder.vocoder_graphs import GraphedVocoder
from qtts.core.engine.vocoder.vocoder_windows import bucket_shapes, decode_bucketed

SMALL = dict(chunk=12, context=3, max_waste=0.5)  # windows of 3 .. 15 frames: many shapes
# 7 rows: pieces of 4, 2, 1; windows of every kind, the last two of one shape (1 row x 10 frames)
LENGTHS = (30, 34, 12, 4, 40, 2, 13)
# The same eager ops on the same inputs, read back from a buffer: equal, but a named tolerance
# all the same (a real graph may pick other kernels than the eager run).
GRAPH_ATOL = 1e-6


class Recording:
    """Capture = remember the window function; replay = run it (on the static buffers, as a CUDA
    graph would). Logs ("capture" | "replay", shape) and can fail the n-th capture."""

    def __init__(self, fail_at: int | None = None, error: Exception | None = None,
                 fail_warmup_at: int | None = None):  # fmt: skip
        self.log, self.fail_at, self.error = [], fail_at, error
        self.fail_warmup_at, self.warmups = fail_warmup_at, 0

    def warmup(self, window, key, steps):
        self.warmups += 1
        if self.warmups - 1 == self.fail_warmup_at:
            raise self.error
        for _ in range(steps):
            window(key)

    def capture(self, window, key):
        if sum(kind == "capture" for kind, _ in self.log) == self.fail_at:
            raise self.error
        self.log.append(("capture", key))
        return SimpleNamespace(replay=lambda: (self.log.append(("replay", key)), window(key)))


@pytest.fixture(scope="module")
def decoder():
    return tiny_decoder(seed=3)


@pytest.fixture(autouse=True)
def _fast_tiny_decode():
    with fast_tiny_decode():
        yield


def _codes(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 64, (n, 16), generator=gen) for n in LENGTHS]


def _eager_calls(decoder, log):
    """Log ("eager", shape) for every call of the decoder module itself."""
    return decoder.register_forward_pre_hook(
        lambda _, args: log.append(("eager", (args[0].shape[0], args[0].shape[2])))
    )


def test_each_shape_warms_up_once_then_replays_and_audio_equals_eager(decoder):
    codes = _codes()
    want = decode_bucketed(decoder, codes, **SMALL)
    backend = Recording()
    graphed = GraphedVocoder(decoder, len(LENGTHS), backend, max_frames=15)
    hook = _eager_calls(decoder, backend.log)
    try:
        first = decode_bucketed(decoder, codes, graphed, **SMALL)
        mark = len(backend.log)
        again = decode_bucketed(decoder, _codes(), graphed, **SMALL)  # every shape replays
    finally:
        hook.remove()
    for got in (first, again):
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            torch.testing.assert_close(g, w, rtol=0, atol=GRAPH_ATOL, msg=f"row {i}")
    captures = [key for kind, key in backend.log if kind == "capture"]
    assert captures[0] == (4, 15)  # the largest shape first: it sizes the pool
    assert len(captures) == len(set(captures)) and set(captures) <= bucket_shapes(7, **SMALL)
    for key in captures:  # the shape's own eager call comes right before its capture
        at = backend.log.index(("capture", key))
        assert backend.log[at - 1] == ("eager", key)
    replays = [key for kind, key in backend.log if kind == "replay"]
    assert set(replays) | {(4, 15)} == set(captures)
    # Replays of one shape back to back (the same static audio): each copied out in time.
    assert any(a == b for a, b in zip(replays, replays[1:], strict=False))
    # The second decode only replays (the decoder's calls there are the replays' own).
    assert all(kind != "capture" for kind, _ in backend.log[mark:])


def test_replay_reads_the_static_codes(decoder):
    """A replay decodes what was copied into the static buffer, not what the capture saw."""
    graphed = GraphedVocoder(decoder, 2, Recording(), max_frames=15)
    a, b = (torch.randint(0, 64, (2, 16, 6), generator=torch.Generator().manual_seed(s))
            for s in (1, 2))  # fmt: skip
    with torch.inference_mode():
        graphed(a)  # eager, then captured
        got = graphed(b).clone()  # replayed
        torch.testing.assert_close(got, decoder(b), rtol=0, atol=GRAPH_ATOL)


def test_a_failed_capture_logs_once_and_decodes_eagerly_from_then_on(decoder, caplog):
    backend = Recording(fail_at=1, error=RuntimeError("capture_end: operation not permitted"))
    graphed = GraphedVocoder(decoder, len(LENGTHS), backend, max_frames=15)
    want = decode_bucketed(decoder, _codes(), **SMALL)
    with caplog.at_level(logging.WARNING, logger="qtts"):
        got = decode_bucketed(decoder, _codes(), graphed, **SMALL)
        decode_bucketed(decoder, _codes(), graphed, **SMALL)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=GRAPH_ATOL)
    warnings = [r for r in caplog.records if "vocoder CUDA graph" in r.getMessage()]
    assert len(warnings) == 1 and "without graphs" in warnings[0].getMessage()
    assert graphed.eager and graphed.graphs == {} and graphed.static_audio is None
    assert sum(kind == "capture" for kind, _ in backend.log) == 1  # never tried again
    # The allocator may be left mid-capture: no vocoder of this process captures again.
    assert capture_broken() is not None
    other = GraphedVocoder(decoder, 2, Recording(), max_frames=15)
    with torch.inference_mode():
        other(torch.zeros(2, 16, 6, dtype=torch.long))
    assert other.graphs == {} and other.backend is None


def test_out_of_memory_in_a_capture_raises_and_a_smaller_reservation_re_arms(decoder):
    """Out of memory is not a broken capture: it raises for the synthesizer's retry (which halves
    the rows per call and reserves that), and the graphs come back at the smaller size."""
    error = RuntimeError("CUDA error: out of memory")
    backend = Recording(fail_at=0, error=error)  # the largest shape's capture
    graphed = GraphedVocoder(decoder, 4, backend, max_frames=15)
    with pytest.raises(torch.OutOfMemoryError, match="vocoder window"):
        decode_bucketed(decoder, _codes(), graphed, **SMALL)
    assert not graphed.eager and graphed.graphs == {} and capture_broken() is None
    backend.fail_at = None
    graphed.reserve(2)  # the synthesizer's retry then calls with at most 2 rows
    want = decode_bucketed(decoder, _codes()[:2], **SMALL)
    got = decode_bucketed(decoder, _codes()[:2], graphed, **SMALL)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=GRAPH_ATOL)
    assert graphed.graphs and all(rows <= 2 for rows, _ in graphed.graphs)


def test_out_of_memory_in_an_eager_run_drops_the_graphs_and_raises(decoder):
    error = RuntimeError("CUDA error: out of memory")
    backend = Recording(error=error, fail_warmup_at=1)  # the largest shape's warm-up passes
    graphed = GraphedVocoder(decoder, len(LENGTHS), backend, max_frames=15)
    with pytest.raises(torch.OutOfMemoryError, match="vocoder window"):
        decode_bucketed(decoder, _codes(), graphed, **SMALL)
    assert graphed.graphs == {} and graphed.backend is None and not graphed.eager


def test_a_new_reservation_drops_the_graphs_and_more_rows_are_refused(decoder):
    graphed = GraphedVocoder(decoder, 2, Recording(), max_frames=15)
    with torch.inference_mode():
        graphed(torch.zeros(2, 16, 6, dtype=torch.long))
        assert graphed.static_codes.shape == (2, 16, 15) and set(graphed.graphs) == {
            (2, 15),
            (2, 6),
        }
        with pytest.raises(ValueError, match="outside the reserved 2 x 15"):
            graphed(torch.zeros(4, 16, 3, dtype=torch.long))
        graphed.reserve(2)  # the same plan: the graphs stay
        assert len(graphed.graphs) == 2
        graphed.reserve(4)  # a new plan: buffers, graphs and pool go (a fresh pool next)
        assert graphed.graphs == {} and graphed.static_codes is None and graphed.backend is None
        graphed(torch.zeros(4, 16, 3, dtype=torch.long))
    assert graphed.static_codes.shape == (4, 16, 15) and set(graphed.graphs) == {(4, 15), (4, 3)}


def test_on_cuda_the_backend_captures_thread_local_on_the_codes_device(decoder, monkeypatch):
    """The default backend: CudaGraphs on the decoder's device, in "thread_local" mode so the
    decode loop's thread is not stopped by the vocoder thread's capture (faked: no GPU here),
    capturing on its own stream, or on capture_stream when given (a green context's stream: its
    graphs must be captured there for the SM limit to hold in their replay)."""
    made = []

    class FakeCudaGraphs(Recording):
        def __init__(self, device, capture_error_mode, stream):
            super().__init__()
            made.append((device, capture_error_mode, stream))

    monkeypatch.setattr(vocoder_graphs, "CudaGraphs", FakeCudaGraphs)
    with torch.inference_mode():
        for stream in (None, "green"):
            graphed = GraphedVocoder(decoder, 1, max_frames=15, capture_stream=stream)
            graphed(torch.zeros(1, 16, 3, dtype=torch.long))
    cpu = torch.device("cpu")
    assert made == [(cpu, "thread_local", None), (cpu, "thread_local", "green")]


def test_capture_all_captures_every_planned_shape_so_decoding_only_replays(decoder):
    shapes = bucket_shapes(4, chunk=12, context=3, max_waste=0.5)
    backend = Recording()
    graphed = GraphedVocoder(decoder, 4, backend, max_frames=15)
    graphed.capture_all(shapes | {(8, 15), (2, 99)}, torch.device("cpu"))  # beyond: skipped
    assert set(graphed.graphs) == shapes
    captured = [key for kind, key in backend.log if kind == "capture"]
    assert captured[0] == max(shapes) and len(captured) == len(shapes)  # the largest sizes the pool
    want = decode_bucketed(decoder, _codes()[:4], **SMALL)
    mark = len(backend.log)
    got = decode_bucketed(decoder, _codes()[:4], graphed, **SMALL)
    assert all(kind == "replay" for kind, _ in backend.log[mark:])
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=GRAPH_ATOL)


def test_out_of_memory_at_one_row_decodes_without_graphs_until_a_new_size(decoder):
    """At one row the retry has nothing smaller: graphs are speed, so this vocoder decodes
    eagerly (the process's other graphs stay on) until a new reservation re-arms it."""
    error = RuntimeError("CUDA error: out of memory")
    backend = Recording(fail_at=0, error=error)
    graphed = GraphedVocoder(decoder, 1, backend, max_frames=15)
    want = decode_bucketed(decoder, _codes()[:1], **SMALL)
    got = decode_bucketed(decoder, _codes()[:1], graphed, **SMALL)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=GRAPH_ATOL)
    assert graphed.eager and capture_broken() is None
    backend.fail_at = None
    graphed.reserve(2)
    assert not graphed.eager
    decode_bucketed(decoder, _codes()[:2], graphed, **SMALL)
    assert graphed.graphs


def test_windows_over_graph_max_decode_eagerly_and_are_never_captured(decoder):
    """QTTS_VOCODER_GRAPH_MAX: a window of more rows x frames decodes eagerly every time (its
    device time hides its launches); the rest replay graphs, the largest graphed shape captured
    first (it sizes the pool). The audio is the eager decode's either way."""
    limit = 20  # rows x frames: (1, <=20), (2, <=10), (4, <=5) are graphed
    backend = Recording()
    graphed = GraphedVocoder(decoder, 4, backend, max_frames=15, graph_max=limit)
    want = decode_bucketed(decoder, _codes(), **SMALL)
    eager: list = []
    hook = _eager_calls(decoder, eager)
    try:
        first = decode_bucketed(decoder, _codes(), graphed, **SMALL)
        again = decode_bucketed(decoder, _codes(), graphed, **SMALL)
    finally:
        hook.remove()
    for got in (first, again):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=GRAPH_ATOL)
    captured = [key for kind, key in backend.log if kind == "capture"]
    assert captured and captured[0] == (4, 5)  # the most rows x frames within the limit
    assert all(rows * frames <= limit for rows, frames in captured)
    over = {shape for _, shape in eager if shape[0] * shape[1] > limit}
    assert over and not over & set(graphed.graphs)  # met, decoded, never captured
    assert graphed.captures == len(captured) and graphed.capture_s > 0.0
    graphed.capture_all(bucket_shapes(4, **SMALL), torch.device("cpu"))  # ahead: graphed only
    assert all(rows * frames <= limit for rows, frames in graphed.graphs)


def test_captures_are_counted_for_the_clock(decoder):
    """The one-time work a job's summary reports: how many graphs, and their capture seconds."""
    graphed = GraphedVocoder(decoder, 2, Recording(), max_frames=15)
    with torch.inference_mode():
        graphed(torch.zeros(2, 16, 6, dtype=torch.long))  # the largest (2, 15), then (2, 6)
        graphed(torch.zeros(2, 16, 6, dtype=torch.long))  # a replay: nothing new
    assert graphed.captures == 2 and graphed.capture_s > 0.0
