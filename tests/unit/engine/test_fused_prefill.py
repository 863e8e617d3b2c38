"""The fused prefill (FusedStack.prefill: the GPU's prefill on the fused layer path) against its
twin, the module path's padded prefill: the last positions' hidden states and logits and the KV
written into each slot's cache rows agree within float rounding, with slots given out of order,
with CUDA's SDPA output layout, and through the engine the codes are those of the CPU's official
single-prompt prefill. The pass issues no host sync and traces as one graph."""

import copy

import engines
import pytest
import torch
from op_log import OpLog

from qtts.core.engine.step.fused_stack import FusedStack
from qtts.core.engine.step.kv_cache import TalkerKVCache
from qtts.core.engine.step.slots import SlotFill
from qtts.core.model.fused_weights import fuse_projections

# fp32; the fused q/k/v and gate/up matmuls may sum their column blocks in another order, and the
# attention adds a -inf bias where the twin masks: a few ulps of values of order 1.
HIDDEN_ATOL = 1e-5
LOGITS_ATOL = 1e-4  # the codec head sums H products of those hidden states
KV_ATOL = 1e-5


@pytest.fixture
def fused_model(tiny_gqa):
    """(config, model with fused projections, tokenizer): a copy, the session's model stays."""
    config, model, tok = tiny_gqa
    model = copy.deepcopy(model)
    fuse_projections(model.talker.model)
    return config, model, tok


def _padded(prompts):
    """Right-padded embeddings [m, L, H], lengths int64 [m], the module path's bool mask."""
    lengths = torch.tensor([p.embeds.shape[0] for p in prompts])
    width = int(lengths.max())
    x = torch.zeros(len(prompts), width, prompts[0].embeds.shape[1])
    for row, p in zip(x, prompts, strict=True):
        row[: p.embeds.shape[0]] = p.embeds
    keys = torch.arange(width)
    mask = (keys[None, :] <= keys[:, None])[None] & (keys < lengths[:, None, None])  # [m, L, L]
    return x, lengths, mask[:, None]


def _caches(config, slots=4, max_len=64):
    t = config.talker
    return [TalkerKVCache(t.num_hidden_layers, slots, t.num_key_value_heads, max_len, t.head_dim,
                          dtype=torch.float32, device="cpu") for _ in range(2)]  # fmt: skip


def _both(fused_model, count: int, slots: list[int]):
    """The module path's and the fused stack's prefill of `count` prompts into `slots`:
    ((last hidden [m, H], cache) for each)."""
    config, model, _ = fused_model
    prompts = engines.prompts(fused_model)[:count]
    x, lengths, mask = _padded(prompts)
    rows, width = torch.arange(count), x.shape[1]
    module_cache, fused_cache = _caches(config)
    index = torch.tensor(slots)
    pos = torch.arange(width).expand(count, width)
    hidden = model.talker.model(x, pos, None if count == 1 else mask,
                                module_cache.prefill_writer(index))  # fmt: skip
    stack = FusedStack(model.talker.model, 64)
    last = stack.prefill(x, lengths, fused_cache.prefill_writer(index))
    return (hidden[rows, lengths - 1], module_cache), (last, fused_cache)


@pytest.mark.parametrize("slots", [[2, 0, 3], [1]], ids=["padded-group", "single"])
def test_fused_prefill_matches_the_module_path(fused_model, slots):
    (want, want_cache), (got, got_cache) = _both(fused_model, len(slots), slots)
    torch.testing.assert_close(got, want, atol=HIDDEN_ATOL, rtol=0)
    head = fused_model[1].talker.codec_head
    torch.testing.assert_close(head(got), head(want), atol=LOGITS_ATOL, rtol=0)
    # Every slot's rows, padding included (both paths write it), and untouched slots as zeros.
    torch.testing.assert_close(got_cache.k, want_cache.k, atol=KV_ATOL, rtol=0)
    torch.testing.assert_close(got_cache.v, want_cache.v, atol=KV_ATOL, rtol=0)
    assert got_cache.k[:, 1 if slots != [1] else 0].abs().max() == 0  # a slot left alone


def test_fused_prefill_with_the_cuda_output_layout(fused_model, sdpa_bthd):
    """CUDA's memory-efficient SDPA returns the grouped output transposed in memory: the fused
    prefill reshapes it back to head order, never views it."""
    (want, want_cache), (got, got_cache) = _both(fused_model, 3, [2, 0, 3])
    heads, kv_heads = (fused_model[0].talker.num_attention_heads,
                       fused_model[0].talker.num_key_value_heads)  # fmt: skip
    grouped = [s for s in sdpa_bthd if s[1] == kv_heads and s[2] > 1 and heads > kv_heads]
    assert grouped, f"no grouped prefill call went through the patched SDPA: {sdpa_bthd}"
    torch.testing.assert_close(got, want, atol=HIDDEN_ATOL, rtol=0)
    torch.testing.assert_close(got_cache.v, want_cache.v, atol=KV_ATOL, rtol=0)


def test_fused_engine_prefill_state_matches_single_prompts(tiny_gqa):
    """A grouped fused prefill into slots given out of order vs the CPU's one prompt at a time."""
    tiny = (tiny_gqa[0], copy.deepcopy(tiny_gqa[1]), tiny_gqa[2])
    single = engines.engine(tiny, 4, True)
    fused = engines.engine(tiny, 4, True, engines.gpu_tuning())
    assert fused.talker_prefill is not None and single.talker_prefill is None
    fills = [SlotFill(s, p, 10, s) for s, p in zip([3, 0, 2], engines.prompts(tiny), strict=False)]
    for f in fills:
        single.prefill([f])
    fused.prefill(fills)
    a, b = single.state, fused.state
    torch.testing.assert_close(b.past_hidden, a.past_hidden, atol=HIDDEN_ATOL, rtol=0)
    assert torch.equal(b.c0, a.c0) and torch.equal(b.kv.lengths, a.kv.lengths)
    for f in fills:
        n = f.prompt.embeds.shape[0]
        torch.testing.assert_close(b.kv.k[:, f.slot, :, :n], a.kv.k[:, f.slot, :, :n],
                                   atol=KV_ATOL, rtol=0)  # fmt: skip
        torch.testing.assert_close(b.kv.v[:, f.slot, :, :n], a.kv.v[:, f.slot, :, :n],
                                   atol=KV_ATOL, rtol=0)  # fmt: skip


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_fused_prefill_groups_give_the_official_prefills_codes(tiny_gqa, greedy):
    """Through refills in groups of up to 3 on the fused path, the codes of the CPU path, which
    prefills one prompt at a time with the official numerics."""
    tiny = (tiny_gqa[0], copy.deepcopy(tiny_gqa[1]), tiny_gqa[2])
    prompts, codes = engines.prompts(tiny), {}
    for name, tuning in (("cpu", engines.cpu_tuning()),
                           ("fused", engines.gpu_tuning(prefill_group=3))):  # fmt: skip
        eng = engines.engine(tiny, 3, greedy, tuning)
        codes[name] = engines.run_codes(eng, engines.engine_requests(prompts))
    assert sorted(codes["fused"]) == sorted(codes["cpu"]) == list(range(len(engines.TEXTS)))
    for key, want in codes["cpu"].items():
        assert torch.equal(codes["fused"][key], want), key  # token ids: exact


def test_fused_prefill_has_no_host_sync(tiny_gqa):
    tiny = (tiny_gqa[0], copy.deepcopy(tiny_gqa[1]), tiny_gqa[2])
    eng = engines.engine(tiny, 4, False, engines.gpu_tuning())
    fills = [SlotFill(i, p, 10, i) for i, p in enumerate(engines.prompts(tiny)[:4])]
    with OpLog() as log:
        eng.prefill(fills)
    assert log.host_syncs() == [] and log.mask_indexing == []
    assert any("qk_norm_rope_prefill" in op for op in log.ops)  # the fused pass ran


def test_fused_prefill_traces_as_one_graph(fused_model):
    """torch.compile(fullgraph=True) fails on any graph break; backend="eager" compiles nothing."""
    torch._dynamo.reset()
    config, model, _ = fused_model
    x, lengths, _ = _padded(engines.prompts(fused_model)[:3])
    stack, index = FusedStack(model.talker.model, 64), torch.tensor([2, 0, 3])
    traced_cache, eager_cache = _caches(config)
    traced = torch.compile(stack.prefill, fullgraph=True, backend="eager", dynamic=False)
    got = traced(x, lengths, traced_cache.prefill_writer(index))
    want = stack.prefill(x, lengths, eager_cache.prefill_writer(index))
    torch.testing.assert_close(got, want, atol=HIDDEN_ATOL, rtol=0)
    torch.testing.assert_close(traced_cache.k, eager_cache.k, atol=KV_ATOL, rtol=0)
