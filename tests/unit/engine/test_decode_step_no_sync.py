"""The decode step issues no host-synchronising op (tests/op_log.py), so it can be captured in a
CUDA graph and queued ahead of the host: greedy and sampled, on the fused path the GPU replays,
on its module-path twin and on the packed path, with the GPU's other tuning. Run on CPU
tensors, where the ops are the same as on CUDA (only the kernels behind them differ), and on the
meta device, where any read of a tensor's value on the host (.item(), .tolist(), bool()) fails."""

import engines
import pytest
from op_log import OpLog

PATHS = list(engines.GPU_PATHS)
SAMPLING = [pytest.param(True, id="greedy"), pytest.param(False, id="sampled")]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("greedy", SAMPLING)
def test_decode_step_has_no_host_sync(tiny_gqa, path, greedy):
    tuning = engines.gpu_path_tuning(path)
    eng = engines.prefilled(tiny_gqa, 4, 3, greedy, tuning)  # one empty slot rides along
    with OpLog() as log:
        for _ in range(3):
            eng.decode_step(64)
    assert log.host_syncs() == []
    assert len(log.ops) > 500  # the mode really saw the step


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("greedy", SAMPLING)
def test_decode_step_runs_on_meta_tensors(tiny_gqa, path, greedy):
    tuning = engines.gpu_path_tuning(path)
    eng = engines.prefilled(engines.on_meta(tiny_gqa), 4, 3, greedy, tuning, device="meta")
    with OpLog() as log:
        for _ in range(2):
            eng.decode_step(64)  # raises on any host read of a value
    assert log.copies == [] and log.host_syncs() == []
    assert eng.state.codes.is_meta


def test_the_cpu_sampler_syncs_only_in_its_top_k_candidate_draw(tiny_gqa):
    """On CPU (no graphs) the sampler may read one flag per sampling site on the host (the top-k
    candidate draw's tie check): exactly one read per site, and none when greedy."""
    for greedy, reads in ((True, 0), (False, 16)):  # 1 talker + 15 predictor sites per step
        eng = engines.prefilled(tiny_gqa, 4, 3, greedy, engines.cpu_tuning())
        with OpLog() as log:
            eng.decode_step(64)
        assert log.host_syncs() == ["_local_scalar_dense.default"] * reads
