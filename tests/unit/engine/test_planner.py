"""The memory planner at the real 0.6B/1.7B dimensions, for 80 GiB and 24 GiB cards: short, long
and mixed rows stay within budget; length groups size each KV cache to its own rows; an explicit
batch size that cannot fit is refused, naming the largest that can."""

import pytest
import torch

from qtts.core.capacity.job_fit import plan_model, synthetic_shapes
from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.plan.planner import GIB, MAX_AUTO_SLOTS, length_groups, plan_memory
from qtts.core.engine.step.views import KV_ALIGN, aligned_kv_len
from qtts.core.engine.vocoder.vocoder_windows import bucket_shapes, frame_buckets
from qtts.core.synthesis.memory_plan import MemoryPlanError, fitting_plan

GPU = EngineTuning.for_device("cuda", env={})


@pytest.fixture(scope="module", params=["0.6b", "1.7b"])
def model(request):
    return plan_model(None, request.param, torch.bfloat16)


def _rows(model, tokens: list[int]):
    return [s for t in tokens for s in synthetic_shapes(model, t, 1, None)[0]]


ROWS = {
    "short": [20] * 600,
    "long": [900] * 300,  # budget 7,300 frames each
    "mixed": [20] * 400 + [200] * 300 + [900] * 40,
}


@pytest.mark.parametrize("gib", [80, 24])
@pytest.mark.parametrize("kind", ROWS)
def test_auto_plans_fit_their_card(model, gib, kind):
    plan = plan_memory(_rows(model, ROWS[kind]), model.dims, gib * GIB, model.weights_bytes, GPU)
    assert plan.fits and plan.total_bytes <= plan.budget_bytes
    assert 1 <= plan.slots <= MAX_AUTO_SLOTS["cuda"]
    for g in plan.groups:
        assert 1 <= g.slots <= len(g.rows)
        rows = _rows(model, ROWS[kind])
        # Sized to its own longest row, rounded up so every view is aligned (views.KV_ALIGN).
        assert g.kv_len == aligned_kv_len(max(rows[i].kv_need for i in g.rows))
        assert g.views[-1] == g.kv_len and all(v % 256 == 0 for v in g.views[:-1])
        assert all(v % KV_ALIGN == 0 for v in g.views)
    if kind == "short" and gib == 80:
        assert plan.slots == MAX_AUTO_SLOTS["cuda"]


def test_length_groups_size_each_cache_to_its_own_rows(model):
    """One long row among 600 short ones: without groups every slot would hold its KV length."""
    rows = _rows(model, [900] + [20] * 600)
    plan = plan_memory(rows, model.dims, 80 * GIB, model.weights_bytes, GPU)
    long, short = plan.groups
    assert len(long.rows) == 1 and long.slots == 1 and long.kv_len > 7000
    assert short.slots == 256 and short.kv_len == aligned_kv_len(rows[1].kv_need) <= 304
    job_wide = 256 * long.kv_len * model.dims.kv_bytes_per_position()
    assert job_wide > 80 * GIB > plan.total_bytes  # what the old job-wide cache would need
    assert plan.fits


def test_groups_bound_kv_waste_and_keep_every_row_once():
    from qtts.core.engine.plan.planner import GROUP_KV_SHARE, RowShape

    rows = [RowShape(p, b, 1) for p, b in [(30, 400), (200, 1700), (25, 300), (120, 1000)] * 50]
    groups = length_groups(rows)
    assert sorted(i for g in groups for i in g) == list(range(len(rows)))
    for g in groups:
        top = rows[g[0]].kv_need
        assert all(GROUP_KV_SHARE * top <= rows[i].kv_need <= top for i in g)


def test_an_explicit_batch_size_is_honoured_or_refused(model):
    rows = _rows(model, [250] * 1024)
    ok = plan_memory(rows, model.dims, 80 * GIB, model.weights_bytes, GPU, batch_size=100)
    assert ok.fits and ok.slots == 100 and ok.requested == 100
    big = plan_memory(rows, model.dims, 24 * GIB, model.weights_bytes, GPU, batch_size=256)
    assert not big.fits and big.total_bytes > big.budget_bytes
    n = big.largest_fitting
    assert n is not None and 1 <= n < 256
    at = plan_memory(rows, model.dims, 24 * GIB, model.weights_bytes, GPU, batch_size=n)
    over = plan_memory(rows, model.dims, 24 * GIB, model.weights_bytes, GPU, batch_size=n + 1)
    assert at.fits and not over.fits
    with pytest.raises(MemoryPlanError, match=f"largest batch size that fits is {n}"):
        fitting_plan(rows, model.dims, 24 * GIB, model.weights_bytes, GPU, batch_size=256,
                     device_kind="cuda")  # fmt: skip


def test_auto_reports_the_largest_batch_size_that_would_fit(model):
    """Not the smallest group's row count: the --batch-size that fits, up to auto's cap."""
    rows = _rows(model, [250] * 1000 + [40] * 3)
    auto = plan_memory(rows, model.dims, 24 * GIB, model.weights_bytes, GPU)
    n = auto.largest_fitting
    assert auto.fits and n is not None and n > 3
    at = plan_memory(rows, model.dims, 24 * GIB, model.weights_bytes, GPU, batch_size=n)
    over = plan_memory(rows, model.dims, 24 * GIB, model.weights_bytes, GPU, batch_size=n + 1)
    assert at.fits and (n == MAX_AUTO_SLOTS["cuda"] or not over.fits)


def test_nothing_fits_is_reported_not_hidden(model):
    rows = _rows(model, [900] * 4)
    plan = plan_memory(rows, model.dims, 2 * GIB, model.weights_bytes, GPU)
    assert not plan.fits and plan.largest_fitting is None
    with pytest.raises(MemoryPlanError, match="not even one slot fits"):
        fitting_plan(rows, model.dims, 2 * GIB, model.weights_bytes, GPU, batch_size=None,
                     device_kind="cuda")  # fmt: skip


def test_the_plan_sizes_the_sampler_the_settings_choose(model):
    """QTTS_SAMPLER=torch on a GPU runs the twin, whose step holds more per vocabulary id than
    the kernel: the plan counts that sampler's bytes, not the kernel's."""
    from dataclasses import replace

    rows = _rows(model, [20] * 8)

    def activation(tuning) -> int:
        plan = plan_memory(rows, model.dims, 80 * GIB, model.weights_bytes, tuning, 8)
        return plan.groups[0].activation_bytes

    twin = activation(EngineTuning.for_device("cuda", env={"QTTS_SAMPLER": "torch"}))
    assert twin == activation(replace(GPU, sampler="torch"))
    assert twin > activation(replace(GPU, sampler="triton"))


def test_the_plan_counts_the_vocoders_graphs_from_its_window_table(model):
    """One graph per window shape: every frame bucket at every power-of-two row count up to the
    vocoder batch; none when the job runs without graphs."""
    from dataclasses import replace

    rows = _rows(model, [20] * 64)
    plan = plan_memory(rows, model.dims, 80 * GIB, model.weights_bytes, GPU)
    pieces = plan.vocoder_batch.bit_length()  # 1, 2, 4, ... up to the batch
    assert plan.vocoder_graphs == pieces * len(frame_buckets())
    assert plan.vocoder_graphs == len(bucket_shapes(plan.vocoder_batch))
    # 26 lengths x at most 5 row counts (VOCODER_MAX_BATCH 16): few enough to capture lazily
    assert plan.as_json()["vocoder_graphs"] == plan.vocoder_graphs <= 130
    eager = plan_memory(rows, model.dims, 80 * GIB, model.weights_bytes,
                        replace(GPU, cuda_graphs=False))  # fmt: skip
    assert eager.vocoder_graphs == 0 == eager.as_json()["vocoder_graphs"]


def test_the_plans_memory_parts_add_up_to_its_total(model):
    """`qtts plan`'s JSON `memory`: the KV cache apart from the rest of the slots' state, and
    without graphs only the larger of the decode step and a prefill pass (never both held)."""
    from dataclasses import replace

    rows = _rows(model, [200] * 64)
    for tuning in (GPU, replace(GPU, cuda_graphs=False)):
        plan = plan_memory(rows, model.dims, 80 * GIB, model.weights_bytes, tuning)
        parts = plan.as_json()["memory"]
        assert sum(parts.values()) == plan.total_bytes
        assert parts["kv_cache"] == plan.peak_group.kv_bytes > 0 < parts["slot_state"]
        held = [k for k in ("decode_step", "prefill") if k in parts]
        assert len(held) == (2 if tuning.cuda_graphs else 1)


def test_a_dataset_job_that_fits_one_pass_runs_as_one(model):
    """Rows of 3 to 15 s (budgets from their text) on a 141 GiB card: cut by KV need they make
    several length groups, but every one would get the 256 slots the longest gets, so the plan
    runs them as one engine pass (one capture, one drain) instead of five."""
    tokens = [int(t) for t in torch.linspace(12, 60, 2048)]
    rows = _rows(model, tokens)
    assert len(length_groups(rows)) >= 3  # as cut
    plan = plan_memory(rows, model.dims, 141 * GIB, model.weights_bytes, GPU)
    assert plan.fits and len(plan.groups) == 1
    (group,) = plan.groups
    assert group.slots == 256 and sorted(group.rows) == list(range(len(rows)))
    needs = [rows[i].kv_need for i in group.rows]
    assert needs == sorted(needs, reverse=True)  # still longest first: the pass's order
    assert group.kv_len == aligned_kv_len(max(r.kv_need for r in rows))


def test_groups_stay_apart_where_joining_costs_slots(model):
    """On a 24 GiB card the long rows' cache leaves fewer slots than the short rows get alone:
    the short rows keep a pass of their own, with more slots. Every row is planned once."""
    rows = _rows(model, [400] * 300 + [20] * 600)
    plan = plan_memory(rows, model.dims, 24 * GIB, model.weights_bytes, GPU)
    assert plan.fits and len(plan.groups) == 2
    long, short = plan.groups
    assert short.slots > long.slots
    assert sorted(i for g in plan.groups for i in g.rows) == list(range(len(rows)))


def test_merge_groups_joins_only_what_keeps_its_slots():
    from qtts.core.engine.plan.planner import merge_groups

    slots = {0: 8, 1: 8, 2: 16, 3: 4}  # each row's slots alone; a group gets its smallest

    def slots_of(ix):
        return min(slots[i] for i in ix)

    # 1 joins 0 (8 >= 8); 2 would drop from 16 to 8: apart; 3 would drop 2 from 16 to 4: apart
    assert merge_groups([[0], [1], [2], [3]], slots_of) == [([0, 1], 8), ([2], 16), ([3], 4)]
    assert merge_groups([[0], [1]], lambda ix: 0) == [([0], 0), ([1], 0)]  # unfit: apart
    assert merge_groups([], slots_of) == []
