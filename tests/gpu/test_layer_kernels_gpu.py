"""The fused stack's Triton kernels compiled for the GPU == their torch twins on CUDA tensors, in
bf16 and fp32 at the real head and MLP sizes; and the custom ops dispatch to the kernels there.
The CPU twin of this file is tests/unit/kernels/test_layer_kernels.py (interpreter)."""

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

# As the interpreter test: one rounding of the narrow dtype; fp32 noise of a few ulps.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2**-7}
# The rotated q/k: the norm's fp32 sum runs in another order on the GPU than in the twin, so one
# bf16 rounding of a normed value may land an ulp apart, and the rotation adds two such products
# whose sum can be smaller than either: an ulp of a 2-4 value read against a 1.7 output was 0.009
# on the first H200 run. Two roundings of the narrow dtype.
ROPE_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2**-6}


def _rel(a, b) -> float:
    return ((a.float() - b.float()).abs() / b.float().abs().clamp_min(1.0)).max().item()


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
def test_layer_kernels_equal_their_twins_on_cuda(dtype):
    from qtts.kernels.rms_norm import rms_norm_triton, rms_norm_twin
    from qtts.kernels.rope_cache import qk_norm_rope_cache_triton, qk_norm_rope_cache_twin
    from qtts.kernels.silu_mul import silu_mul_triton, silu_mul_twin

    g = torch.Generator(device="cuda").manual_seed(0)
    x = (3 * torch.randn(64, 1, 2048, device="cuda", generator=g)).to(dtype)
    w = (1 + 0.1 * torch.randn(2048, device="cuda", generator=g)).to(dtype)
    assert _rel(rms_norm_triton(x, w, 1e-6), rms_norm_twin(x, w, 1e-6)) <= TOLERANCE[dtype]
    gu = (2 * torch.randn(64, 2 * 6144, device="cuda", generator=g)).to(dtype)
    assert _rel(silu_mul_triton(gu), silu_mul_twin(gu)) <= TOLERANCE[dtype]
    b, h, hk, d, s = 64, 16, 8, 128, 512
    qkv = (2 * torch.randn(b, 1, (h + 2 * hk) * d, device="cuda", generator=g)).to(dtype)
    qw, kw = [(1 + 0.1 * torch.randn(d, device="cuda", generator=g)).to(dtype) for _ in range(2)]
    inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, device="cuda").float() / d))
    f = torch.arange(s, device="cuda").float()[:, None] * inv
    cos, sin = f.cos().to(dtype), f.sin().to(dtype)
    pos = torch.randint(0, s, (b, 1), device="cuda", generator=g)
    start = torch.randn(2, 3, b, hk, s, d, device="cuda", generator=g).to(dtype)
    mine, twin = start.clone(), start.clone()
    q1 = qk_norm_rope_cache_triton(qkv, qw, kw, cos, sin, pos, mine[0, 1], mine[1, 1], h, 1e-6)
    q2 = qk_norm_rope_cache_twin(qkv, qw, kw, cos, sin, pos, twin[0, 1], twin[1, 1], h, 1e-6)
    assert _rel(q1, q2) <= ROPE_TOLERANCE[dtype] and _rel(mine, twin) <= ROPE_TOLERANCE[dtype]


def test_the_ops_run_the_kernels_on_cuda(monkeypatch):
    """Spy on the launchers: the custom ops must reach them, not the twins."""
    import qtts.kernels.rms_norm as rn
    import qtts.kernels.silu_mul as sm

    calls = []
    for mod, name in ((rn, "rms_norm_triton"), (sm, "silu_mul_triton")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _r=real, _n=name: calls.append(_n) or _r(*a))
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    rn.rms_norm(x, torch.ones(256, device="cuda", dtype=torch.bfloat16), 1e-6)
    sm.silu_mul(x)
    assert calls == ["rms_norm_triton", "silu_mul_triton"]


# The padded prefill's attention on CUDA's SDPA kernels vs fp32 math over repeated K/V: the
# kernel's accumulation order, and in bf16 one rounding of the output.
ATTENTION_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2**-6}


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
def test_prefill_kernel_and_attention_on_cuda(dtype):
    """The prefill form of the cache kernel (each batch row into its own slot) == its twin, and
    the grouped attention under the pass's bias == the module path's repeated-K/V attention."""
    import torch.nn.functional as F

    from qtts.core.engine.step.prefill_attention import prefill_attention, prefill_bias
    from qtts.core.model.talker import repeat_kv
    from qtts.kernels.rope_cache import qk_norm_rope_prefill_triton, qk_norm_rope_prefill_twin

    g = torch.Generator(device="cuda").manual_seed(1)
    b, h, hk, d, s, t, slots = 8, 16, 8, 128, 512, 100, 16
    qkv = (2 * torch.randn(b, t, (h + 2 * hk) * d, device="cuda", generator=g)).to(dtype)
    qw, kw = [(1 + 0.1 * torch.randn(d, device="cuda", generator=g)).to(dtype) for _ in range(2)]
    inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, device="cuda").float() / d))
    f = torch.arange(s, device="cuda").float()[:, None] * inv
    cos, sin = f.cos().to(dtype), f.sin().to(dtype)
    pos = torch.arange(t, device="cuda").expand(b, t)
    rows = torch.randperm(slots, device="cuda", generator=g)[:b]
    start = torch.randn(2, 2, slots, hk, s, d, device="cuda", generator=g).to(dtype)
    mine, twin = start.clone(), start.clone()
    got = qk_norm_rope_prefill_triton(qkv, qw, kw, cos, sin, pos, mine[0, 1], mine[1, 1], rows,
                                      h, 1e-6)  # fmt: skip
    want = qk_norm_rope_prefill_twin(qkv, qw, kw, cos, sin, pos, twin[0, 1], twin[1, 1], rows,
                                     h, 1e-6)  # fmt: skip
    for a, w in zip(got, want, strict=True):
        assert _rel(a, w) <= ROPE_TOLERANCE[dtype]
    assert _rel(mine, twin) <= ROPE_TOLERANCE[dtype]
    lengths = torch.randint(1, t + 1, (b,), device="cuda", generator=g)
    q, k, v = got
    out = prefill_attention(q, k, v, prefill_bias(lengths, t, h // hk, dtype), d**-0.5)
    keys = torch.arange(t, device="cuda")
    mask = ((keys[None, :] <= keys[:, None]) & (keys < lengths[:, None, None]))[:, None]
    ref = F.scaled_dot_product_attention(q.float(), repeat_kv(k.float(), h // hk),
                                         repeat_kv(v.float(), h // hk), attn_mask=mask,
                                         scale=d**-0.5)  # fmt: skip
    assert _rel(out, ref.transpose(1, 2).reshape(b, t, h * d)) <= ATTENTION_TOLERANCE[dtype]
