"""The decode step traces as ONE graph: torch.compile(fullgraph=True) fails on any graph break
(Python branching on a tensor value, a host read, an untraceable call), which is what would stop
a CUDA graph capture from covering the whole step. backend="eager" traces without compiling
kernels, so this runs on CPU; the traced step must also compute exactly what the eager one does.
"""

import engines
import pytest
import torch


@pytest.mark.slow  # tracing takes ~5 s per case on a 2-core CPU
@pytest.mark.parametrize("path", list(engines.GPU_PATHS))
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_decode_step_traces_as_one_graph(tiny_gqa, path, greedy):
    torch._dynamo.reset()
    tuning = engines.gpu_path_tuning(path)
    traced = engines.prefilled(tiny_gqa, 3, 2, greedy, tuning, budget=12)
    eager = engines.prefilled(tiny_gqa, 3, 2, greedy, tuning, budget=12)
    step = torch.compile(traced.decode_step, fullgraph=True, backend="eager", dynamic=False)
    for _ in range(3):
        step(64)  # raises torch._dynamo.exc.Unsupported on a graph break
        eager.decode_step(64)
    a, b = traced.state, eager.state
    for name in ("c0", "num_tokens", "finished", "codes", "seen"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert torch.equal(a.kv.lengths, b.kv.lengths)
