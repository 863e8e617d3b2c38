"""The packed one-token predictor step (CPU fast path) against its twin, the module forward: same
hidden states up to float rounding, same K/V written, and the same codes through the engine."""

import copy

import engines
import pytest
import torch

from qtts.core.engine.step.kv_cache import PredictorKVCache
from qtts.core.engine.step.packed_stack import PackedStack


def _predictor_caches(stack, batch, dtype):
    attn = stack.layers[0].self_attn
    shape = (len(stack.layers), batch, attn.num_kv_heads, 16, attn.head_dim)
    return [PredictorKVCache(*shape, dtype=dtype, device="cpu") for _ in range(2)]


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_predictor_step_matches_module(tiny, batch):
    stack = tiny[1].talker.code_predictor.model
    width = stack.norm.weight.shape[0]
    gen = torch.Generator().manual_seed(batch)
    start = torch.randn(batch, 2, width, generator=gen)
    module_kv, packed_kv = _predictor_caches(stack, batch, torch.float32)
    packed = PackedStack(stack)
    for cache in (module_kv, packed_kv):  # both start from the same 2-token prefill
        stack(start, torch.arange(2).expand(batch, 2), None, cache)
        assert cache.start == 2  # the cache advances itself after the last layer
    for _ in range(5):  # a few steps, each reading what the previous ones cached
        x = torch.randn(batch, 1, width, generator=gen)
        pos = torch.full((batch, 1), module_kv.start)
        want = stack(x, pos, None, module_kv)
        got = packed(x, pos, None, packed_kv)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        assert module_kv.start == packed_kv.start == pos[0, 0] + 1
    torch.testing.assert_close(packed_kv.k, module_kv.k, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(packed_kv.v, module_kv.v, atol=1e-6, rtol=1e-5)


def test_bfloat16_stack_follows_the_module(tiny):
    stack = copy.deepcopy(tiny[1].talker.code_predictor.model).to(torch.bfloat16)
    width = stack.norm.weight.shape[0]
    module_kv, packed_kv = _predictor_caches(stack, 2, torch.bfloat16)
    x = torch.randn(2, 1, width, dtype=torch.bfloat16)
    pos = torch.zeros(2, 1, dtype=torch.long)
    want = stack(x, pos, None, module_kv)
    got = PackedStack(stack)(x, pos, None, packed_kv)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


def _codes(tiny, packed: bool, greedy: bool):
    eng = engines.engine(
        tiny, 3, greedy, engines.cpu_tuning(layer_path="packed" if packed else "module")
    )
    assert isinstance(eng.predictor_step, PackedStack) == packed
    texts = ["Hi.", "A longer sentence for the test.", "Mid line.", "Ok."]
    return engines.run_codes(eng, engines.engine_requests(engines.prompts(tiny, texts), 8, 50))


@pytest.mark.parametrize("greedy", [True, False])
def test_engine_codes_packed_equal_module(tiny, greedy):
    packed, module = _codes(tiny, True, greedy), _codes(tiny, False, greedy)
    assert sorted(packed) == [0, 1, 2, 3]
    for key in module:
        assert torch.equal(packed[key], module[key]), key
