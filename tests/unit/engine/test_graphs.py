"""Decode graphs captured before decoding (qtts.core.engine.loop.graphs), driven on CPU by backends
that stand in for CUDA graphs: every view the host loop asks for was captured up front, largest
first, before any replay; codes equal the plain eager loop; a failed capture drops every graph and
restores the slot state, and an out-of-memory one surfaces as torch.OutOfMemoryError.

`Traced` is the closer twin of a CUDA graph: it traces the step once (torch.fx make_fx) and replays
the trace, which writes the same slot-state tensors in place with every Python value frozen at
capture time, so Python state baked into a step shows up as wrong codes.
"""

from types import SimpleNamespace

import engines
import pytest
import torch

from qtts.core.engine.loop.graphs import (
    MUTATED_STATE,
    CudaGraphs,
    EagerGraphs,
    GraphCaptureError,
    GraphedDecodeStep,
)
from qtts.core.engine.step.slots import SlotFill
from qtts.core.engine.step.views import view_lengths


class Recording(EagerGraphs):
    """EagerGraphs that logs ("capture", view) and ("replay", view), and can fail a capture."""

    def __init__(self, fail_at: int | None = None, error: Exception | None = None):
        self.log, self.fail_at, self.error = [], fail_at, error
        self.warmed, self.cold = [], []  # views run eagerly; views captured before that

    def warmup(self, step, view_len, steps):
        self.warmed.append(view_len)
        super().warmup(step, view_len, steps)

    def capture(self, step, view_len):
        if len([e for e in self.log if e[0] == "capture"]) == self.fail_at:
            raise self.error
        if view_len not in self.warmed:
            self.cold.append(view_len)
        self.log.append(("capture", view_len))
        graph = super().capture(step, view_len)
        return type(graph)(replay=lambda: (self.log.append(("replay", view_len)), graph.replay()))


class Traced(Recording):
    """Capture = trace one step with make_fx (which runs it, so the slot state is put back as
    it was, as a CUDA capture leaves it); replay = run the trace."""

    def capture(self, step, view_len):
        from torch.fx.experimental.proxy_tensor import make_fx

        if len([e for e in self.log if e[0] == "capture"]) == self.fail_at:
            raise self.error
        self.log.append(("capture", view_len))
        state = step.__self__.state
        saved = [t.clone() for t in _state_tensors(state)]
        trace = make_fx(lambda: step(view_len))()
        for t, value in zip(_state_tensors(state), saved, strict=True):
            t.copy_(value)
        return SimpleNamespace(replay=lambda: (self.log.append(("replay", view_len)), trace()))


def _state_tensors(state):
    return [getattr(state, n) for n in MUTATED_STATE] + [state.kv.lengths]


# As on GPU, nothing reads the host; 32-position views keep the traces few (3 for 96 positions).
TUNING = engines.cpu_tuning(allow_host_sync=False, view_bucket=32)


def _graphed_codes(tiny, backend, greedy=True):
    eng = engines.engine(tiny, 3, greedy, TUNING, max_len=96, max_frames=48)
    views = view_lengths(TUNING.view_bucket, eng.state.kv.max_len)
    step = GraphedDecodeStep(eng, views, backend=backend)
    requests = engines.engine_requests(engines.prompts(tiny), budget0=20)  # KV grows across buckets
    return engines.run_codes(eng, requests, step=step), views


@pytest.mark.parametrize("backend", [Recording, Traced], ids=["eager", "traced"])
@pytest.mark.parametrize("greedy", [True, False])
def test_every_view_captured_before_decoding_and_codes_equal_eager(tiny, greedy, backend):
    backend = backend()
    got, views = _graphed_codes(tiny, backend, greedy)
    captures = [v for kind, v in backend.log if kind == "capture"]
    replays = [v for kind, v in backend.log if kind == "replay"]
    first_replay = next(i for i, (kind, _) in enumerate(backend.log) if kind == "replay")
    assert captures == sorted(views, reverse=True) and len(captures) == first_replay
    assert len(set(replays)) > 1, "the test should make the KV view grow"
    eng = engines.engine(tiny, 3, greedy, TUNING, max_len=96, max_frames=48)
    want = engines.run_codes(eng, engines.engine_requests(engines.prompts(tiny), budget0=20))
    assert sorted(got) == sorted(want) == list(range(len(engines.TEXTS)))
    for key in want:
        assert torch.equal(got[key], want[key]), key


def test_every_view_runs_eagerly_before_any_capture(tiny):
    backend = Recording()
    _, views = _graphed_codes(tiny, backend)
    assert sorted(backend.warmed) == sorted(views) and backend.cold == []


class _FakeCapture:
    """Stands in for CUDA (no GPU here): records the capture's calls, and capture_end raises
    when told to."""

    def __init__(self, calls: list, fail_end: bool):
        self.calls, self.fail_end = calls, fail_end

    def graph(self):
        calls, fail_end = self.calls, self.fail_end

        class Graph:
            def capture_begin(self, pool=None, capture_error_mode="global"):
                calls.append(("begin", pool, capture_error_mode))

            def capture_end(self):
                calls.append("end")
                if fail_end:
                    raise RuntimeError("capture_end: operation not permitted when capturing")

        return Graph()

    def stream(self, stream):
        calls = self.calls

        class Context:
            def __enter__(self):
                calls.append(("stream", stream))

            def __exit__(self, *exc):
                calls.append("caller's stream back")

        return Context()


def _fake_cuda(monkeypatch, fail_end: bool) -> list:
    calls: list = []
    fake = _FakeCapture(calls, fail_end)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", fake.graph)
    monkeypatch.setattr(torch.cuda, "stream", fake.stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "caller's stream")
    monkeypatch.setattr(torch.cuda, "set_stream", lambda stream: calls.append(("set", stream)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("device", device)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    return calls


def _backend() -> CudaGraphs:
    backend = CudaGraphs.__new__(CudaGraphs)  # no pool or side stream without a GPU
    backend.device, backend.pool, backend.stream = torch.device("cuda"), "pool", "capture stream"
    backend.capture_error_mode = "thread_local"
    return backend


def test_a_capture_neither_syncs_nor_empties_the_cache(monkeypatch):
    """A capture is begun and ended on the capture stream, in its error mode and pool, without
    the device sync and emptied cache torch's `graph` context adds to each capture (which beside
    the decode loop would drain its stream); settle() does both once, before a batch of them."""
    calls = _fake_cuda(monkeypatch, fail_end=False)
    backend = _backend()
    backend.capture(lambda view: calls.append(("step", view)), 64)
    assert calls == [("stream", "capture stream"), ("begin", "pool", "thread_local"),
                     ("step", 64), "end", "caller's stream back"]  # fmt: skip
    calls.clear()
    backend.settle()
    assert calls == ["sync", "empty_cache"]


def test_a_failed_capture_ends_the_capture_and_puts_the_callers_stream_back(monkeypatch):
    """A step or capture_end that raises: the capture is still ended, the stream context exits,
    and the backend puts the caller's stream and device back itself (faked CUDA)."""
    calls = _fake_cuda(monkeypatch, fail_end=True)
    with pytest.raises(RuntimeError, match="capture_end"):
        _backend().capture(lambda view: None, 64)
    assert calls[-4:] == ["end", "caller's stream back", ("set", "caller's stream"), ("device", 1)]
    calls = _fake_cuda(monkeypatch, fail_end=False)

    def broken_step(view):
        raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError, match="not permitted"):
        _backend().capture(broken_step, 64)
    assert "end" in calls and calls[-2:] == [("set", "caller's stream"), ("device", 1)]


def test_view_lengths_cover_every_view_the_loop_can_pick():
    from qtts.core.engine.step.views import view_length

    for bucket, max_len in ((16, 96), (16, 100), (256, 8400), (64, 64), (64, 10)):
        views = view_lengths(bucket, max_len)
        assert views == sorted(set(views)) and views[-1] == max_len
        assert {view_length(b, bucket, max_len) for b in range(1, max_len + 40)} == set(views)


def _state_copy(eng):
    s = eng.state
    return {n: getattr(s, n).clone() for n in MUTATED_STATE} | {"lengths": s.kv.lengths.clone()}


def test_capture_after_a_prefill_leaves_the_state_as_it_was(tiny):
    """Warm-up runs real steps on a live state; capture must put it back exactly (the graph's
    first replay is then the step that was due), and decoding goes on as if nothing happened."""
    eng = engines.prefilled(tiny, 3, 2, True, TUNING)
    twin = engines.prefilled(tiny, 3, 2, True, TUNING)
    before = _state_copy(eng)
    step = GraphedDecodeStep(eng, [64], backend=Traced())
    for name, value in _state_copy(eng).items():
        assert torch.equal(value, before[name]), name
    for _ in range(6):
        step(64)
        twin.decode_step(64)
    for name, value in _state_copy(twin).items():
        assert torch.equal(_state_copy(eng)[name], value), name
    assert torch.equal(eng.state.codes, twin.state.codes)


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (
            torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
            torch.OutOfMemoryError,
        ),
        (RuntimeError("operation not permitted when stream is capturing"), GraphCaptureError),
    ],
)
def test_failed_capture_drops_graphs_and_restores_state(tiny, error, raised):
    eng = engines.engine(tiny, 3, True, TUNING, max_len=96, max_frames=48)
    fills = engines.engine_requests(engines.prompts(tiny)[:2], budget0=20)
    eng.prefill([SlotFill(j.key, j.prompt, j.budget, j.seed) for j in fills])
    before = _state_copy(eng)
    views = view_lengths(TUNING.view_bucket, eng.state.kv.max_len)
    with pytest.raises(raised) as info:
        GraphedDecodeStep(eng, views, backend=Recording(fail_at=2, error=error))
    if raised is GraphCaptureError:
        assert "KV view 32" in str(info.value) and "QTTS_CUDA_GRAPHS=0" in str(info.value)
    after = _state_copy(eng)
    for name, value in before.items():
        assert torch.equal(after[name], value), name  # warm-up steps ran; the state is back


def test_out_of_memory_in_the_chain_is_out_of_memory():
    from qtts.core.engine.loop.graphs import is_out_of_memory

    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory")
        except torch.OutOfMemoryError:
            raise RuntimeError("CUDA error: operation failed due to a previous error") from None
    except RuntimeError as e:
        assert is_out_of_memory(e)
    assert not is_out_of_memory(RuntimeError("illegal memory access"))
