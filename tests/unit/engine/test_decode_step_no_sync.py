"""The decode step issues no host-synchronising op (tests/op_log.py), so it can be captured in a
CUDA graph and queued ahead of the host: greedy and sampled, on the module path the GPU replays
and on the packed path, with the GPU's attention and sampler settings. Run on CPU tensors, where
the ops are the same as on CUDA (only the kernels behind them differ)."""

import engines
import pytest
from op_log import OpLog

from qtts.core.engine.slots import SlotFill


def _prefilled(tiny, greedy, settings):
    eng = engines.engine(tiny, 4, greedy, settings)  # 4 slots, 3 filled: an empty one rides along
    p = engines.sampling(greedy)
    prompts = engines.prompts(tiny)[:3]
    eng.prefill([SlotFill(i, pr, 12, 7 + i, p, p) for i, pr in enumerate(prompts)])
    return eng


@pytest.mark.parametrize("packed", [False, True], ids=["module", "packed"])
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_decode_step_has_no_host_sync(tiny_gqa, packed, greedy):
    eng = _prefilled(tiny_gqa, greedy, engines.gpu_settings(packed_predictor=packed))
    with OpLog() as log:
        for _ in range(3):
            eng.decode_step(64)
    assert log.host_syncs() == []
    assert len(log.ops) > 500  # the mode really saw the step


def test_the_cpu_sampler_syncs_only_in_its_top_k_candidate_draw(tiny_gqa):
    """On CPU (no graphs) the sampler may read one flag per sampling site on the host (the top-k
    candidate draw's tie check): exactly one read per site, and none when greedy."""
    for greedy, reads in ((True, 0), (False, 16)):  # 1 talker + 15 predictor sites per step
        eng = _prefilled(tiny_gqa, greedy, engines.cpu_settings())
        with OpLog() as log:
            eng.decode_step(64)
        assert log.host_syncs() == ["_local_scalar_dense.default"] * reads
