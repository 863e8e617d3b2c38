"""The fused stack (engine.fused_stack, the GPU's layer path) is the same model as the module path
(its twin): hidden states within float rounding for the talker's masked one-token step and the
predictor's causal two-token pass, the same codes through the engine, greedy and sampled, and
weights fused as views, never held twice. On CPU its ops run their torch twins; the Triton
kernels are tied to those twins in tests/unit/kernels/test_layer_kernels.py."""

import copy

import engines
import pytest
import torch

from qtts.core.engine.step.fused_stack import CUSTOM_OPS, TWIN_OPS, FusedStack
from qtts.core.engine.step.kv_cache import PredictorKVCache, TalkerKVCache
from qtts.core.model.fused_weights import fuse_projections

# fp32, same arithmetic except the fused q/k/v and gate/up matmuls, whose column blocks may sum in
# another order: a few ulps of hidden states of order 1.
HIDDEN_ATOL = 1e-5


def _talker_views(config, slots, max_len, lengths):
    t = config.talker
    caches = [TalkerKVCache(t.num_hidden_layers, slots, t.num_key_value_heads, max_len, t.head_dim,
                            dtype=torch.float32, device="cpu") for _ in range(2)]  # fmt: skip
    g = torch.Generator().manual_seed(3)
    start = torch.randn(caches[0].k.shape, generator=g)
    for c in caches:
        c.k.copy_(start), c.v.copy_(start * 0.5), c.lengths.copy_(lengths)
    return caches


def test_talker_one_token_step_matches_the_module_path(tiny_gqa):
    config, model, _ = tiny_gqa
    model = copy.deepcopy(model)
    slots, view = 3, 16
    lengths = torch.tensor([2, 9, 15])
    fused_cache, module_cache = _talker_views(config, slots, 32, lengths)
    x = torch.randn(slots, 1, config.talker.hidden_size, generator=torch.Generator().manual_seed(4))
    pos, mask = lengths[:, None], module_cache.decode_mask(view)
    want = model.talker.model(x, pos, mask, module_cache.decode_view(view))
    fuse_projections(model.talker.model)
    got = FusedStack(model.talker.model, 32)(x, pos, mask, fused_cache.decode_view(view))
    torch.testing.assert_close(got, want, atol=HIDDEN_ATOL, rtol=0)
    torch.testing.assert_close(fused_cache.k, module_cache.k, atol=HIDDEN_ATOL, rtol=0)
    torch.testing.assert_close(fused_cache.v, module_cache.v, atol=HIDDEN_ATOL, rtol=0)


def test_predictor_passes_match_the_module_path(tiny_gqa):
    """A frame's first two-token pass (causal) then one-token passes, through the cache."""
    config, model, _ = tiny_gqa
    model = copy.deepcopy(model)
    cp, c = model.talker.code_predictor.model, config.code_predictor
    caches = [PredictorKVCache(c.num_hidden_layers, 3, c.num_key_value_heads, 16, c.head_dim,
                               dtype=torch.float32, device="cpu") for _ in range(2)]  # fmt: skip
    fuse_projections(cp)
    fused = FusedStack(cp, 16)
    g = torch.Generator().manual_seed(5)
    for tokens, first in ((2, 0), (1, 2), (1, 3)):
        x = torch.randn(3, tokens, c.hidden_size, generator=g)
        pos = torch.arange(first, first + tokens).expand(3, tokens)
        want = cp(x, pos, None, caches[0])
        got = fused(x, pos, None, caches[1])
        torch.testing.assert_close(got, want, atol=HIDDEN_ATOL, rtol=0)
    assert caches[0].start == caches[1].start == 4
    torch.testing.assert_close(caches[1].k, caches[0].k, atol=HIDDEN_ATOL, rtol=0)


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_fused_engine_gives_the_module_paths_codes(tiny_gqa, greedy):
    tiny = (tiny_gqa[0], copy.deepcopy(tiny_gqa[1]), tiny_gqa[2])
    prompts = engines.prompts(tiny)
    codes = {}
    for path in ("module", "fused"):
        eng = engines.engine(tiny, 3, greedy, engines.gpu_path_tuning(path))
        assert isinstance(eng.talker_step, FusedStack) == (path == "fused")
        codes[path] = engines.run_codes(eng, engines.engine_requests(prompts))
    assert codes["fused"].keys() == codes["module"].keys()
    for key, c in codes["module"].items():
        assert torch.equal(codes["fused"][key], c), key


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_twins_called_directly_are_the_custom_ops(tiny_gqa, dtype):
    """A CPU's fused stack calls the ops' torch twins itself (EngineTuning.custom_ops False):
    bit for bit what the custom ops give there, prefill and decode steps, codes and K/V."""
    tiny = (tiny_gqa[0], copy.deepcopy(tiny_gqa[1]).to(dtype), tiny_gqa[2])
    runs = {}
    for custom in (True, False):
        tuning = engines.cpu_tuning(dtype, layer_path="fused", custom_ops=custom,
                                        prefill_group=4)  # fmt: skip
        eng = engines.engine(tiny, 3, False, tuning, dtype=dtype)
        assert eng.talker_step.ops is (CUSTOM_OPS if custom else TWIN_OPS)
        codes = engines.run_codes(eng, engines.engine_requests(engines.prompts(tiny)))
        runs[custom] = codes, eng.state.kv.k.clone()
    (codes_op, k_op), (codes_twin, k_twin) = runs[True], runs[False]
    assert codes_op.keys() == codes_twin.keys()
    assert all(torch.equal(codes_op[key], codes_twin[key]) for key in codes_op)
    assert torch.equal(k_op, k_twin)


def test_fused_weights_are_views_not_copies(tiny_gqa):
    model = copy.deepcopy(tiny_gqa[1])
    stack = model.talker.model
    with pytest.raises(RuntimeError, match="fuse_projections first"):
        FusedStack(stack, 8)  # an engine never fuses behind the model's back
    layer = stack.layers[0]
    before = {n: p.clone() for n, p in layer.named_parameters()}
    fuse_projections(stack)
    first = FusedStack(stack, 8)
    attn = layer.self_attn
    fused_ptr = first.layers[0].qkv.untyped_storage().data_ptr()
    for m in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert m.weight.untyped_storage().data_ptr() == fused_ptr  # the module reads the fused
    for name, p in layer.named_parameters():
        assert torch.equal(p, before[name]), name  # same values
    assert "qkv_weight" not in "".join(stack.state_dict())  # the checkpoint's names only
    fuse_projections(stack)  # a second engine on the same model: nothing fused again
    second = FusedStack(stack, 8)
    assert second.layers[0].qkv is first.layers[0].qkv
    assert second.layers[0].gate_up is first.layers[0].gate_up
    stack.to(torch.float64)  # a cast breaks the views: the stale fused weight is refused
    with pytest.raises(RuntimeError, match="fuse_projections first"):
        FusedStack(stack, 8)


def test_a_cast_on_the_meta_device_is_seen_as_stale(tiny_gqa):
    """Meta storages all have address 0: the staleness check must also compare dtypes."""
    stack = copy.deepcopy(tiny_gqa[1]).talker.model.to("meta")
    fuse_projections(stack)
    FusedStack(stack, 8)
    stack.to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="fuse_projections first"):
        FusedStack(stack, 8)
    fuse_projections(stack)  # fused anew, in the new dtype
    assert FusedStack(stack, 8).layers[0].qkv.dtype == torch.bfloat16
