"""Kernel launches per decode step at the real dimensions, pinned (qtts.core.bench.launches): the
path the GPU runs, sampled, at 64 slots, on the meta device. Launches, not bandwidth or FLOPs,
bound a graph-replayed step (qtts.core.engine.plan.roofline), so a change that adds launches must
fail here and update the pin on purpose; one that removes some updates it too. The same for one
padded prefill pass of 64 prompts, which runs eagerly between decode checks."""

from dataclasses import replace

import pytest

from qtts.core.bench.launches import (
    LaunchCounter,
    count_decode_step,
    launches_per_step,
    meta_engine,
    prefill_launches,
)
from qtts.core.engine.device.tuning import EngineTuning

LAUNCH_BUDGET = 1500  # the ceiling; the goal is <= 1,200
# Per step: 103 layer passes x 9 ops (attention counted as 2 launches) + 16 stack calls x (final
# norm + the residual stream's copy) + the heads, embeddings and slot bookkeeping.
PINNED = {
    "0.6b": {"talker_layers": 286, "predictor_passes": 780, "sampling": 16, "other": 103},
    "1.7b": {"talker_layers": 286, "predictor_passes": 780, "sampling": 16, "other": 118},
}


# Per prefill pass: 28 layer passes x 9 ops (attention counted as 2); the rest is the padded
# input's scatter, the bias, the residual stream's copy, the final norm and head on the last
# positions, the first token's sampling and the slots' bookkeeping.
PREFILL_LAYER_BUDGET = 12  # launches per layer pass (issue 21)
PREFILL_PER_LAYER_PASS = 10
PINNED_PREFILL = {"talker_layers": 280, "sampling": 1, "other": 47}  # both sizes


@pytest.mark.parametrize("size", ["0.6b", "1.7b"])
def test_prefill_launches_are_pinned_and_within_budget(size):
    got = prefill_launches(size, 64)
    assert got["prefill_phases"] == PINNED_PREFILL, "launch count changed: update if intended"
    assert got["prefill_launches"] == sum(PINNED_PREFILL.values())
    assert got["prefill_launches_per_layer_pass"] == PREFILL_PER_LAYER_PASS
    assert PREFILL_PER_LAYER_PASS <= PREFILL_LAYER_BUDGET


def test_the_prefill_counter_sees_the_module_path():
    """The module path's padded prefill (QTTS_LAYER_PATH=module), ~70 ops per layer pass: the
    count above is the fused path's, not a blind counter's."""
    twin = replace(EngineTuning.for_device("cuda", env={}), cuda_graphs=False,
                   layer_path="module")  # fmt: skip
    got = prefill_launches("0.6b", 64, twin)
    assert got["prefill_launches_per_layer_pass"] > 6 * PREFILL_PER_LAYER_PASS


@pytest.mark.parametrize("size", ["0.6b", "1.7b"])
def test_launches_per_step_are_pinned_and_within_budget(size):
    got = launches_per_step(size, 64)
    assert got["phases"] == PINNED[size], "launch count changed: update PINNED if intended"
    assert got["launches_per_step"] == sum(PINNED[size].values()) <= LAUNCH_BUDGET


def test_the_count_does_not_depend_on_the_batch():
    assert launches_per_step("0.6b", 1) == launches_per_step("0.6b", 256)


def test_the_counter_sees_the_unfused_twin():
    """The same counter on the module path (QTTS_LAYER_PATH=module): the ~70 ops per layer pass
    that the fused stack replaces, so the low count above is the fused path's, not a blind
    counter's."""
    twin = replace(EngineTuning.for_device("cuda", env={}), cuda_graphs=False,
                   layer_path="module")  # fmt: skip
    counter = count_decode_step(meta_engine("0.6b", 64, twin))
    assert counter.total > 4 * LAUNCH_BUDGET
    assert counter.by_op["aten.mm"] > 700 and counter.by_op["aten.rsqrt"] > 400


def test_views_and_allocations_are_not_launches():
    import torch

    x = torch.empty(4, 8, device="meta")
    with LaunchCounter() as counter:
        y = x.view(8, 4).t()[1:, None].expand(3, 2, 8)  # views only
        torch.empty(3, device="meta")
    assert counter.total == 0 and y.shape == (3, 2, 8)
    with LaunchCounter() as counter:
        x.t().reshape(32)  # a reshape that must copy launches
    assert counter.total == 1
    with LaunchCounter() as counter:
        (x + 1).sum()
    assert counter.total == 2
