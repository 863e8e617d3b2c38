"""The fused stack's Triton kernels == their torch twins, under TRITON_INTERPRET=1: RMSNorm,
silu(gate) * up, and q/k norm + RoPE + the KV cache write, in fp32, fp16 and bf16, on odd sizes
and strided inputs (a cache layer's slice, positions expanded as the predictor passes them), and
its prefill form (each batch row into its own slot's cache row, k and v returned as well).

Triton fixes interpreter mode at its first import, so the kernels run in ONE subprocess that also
computes the twins on the same inputs and reports the largest difference per case.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from qtts.kernels.rms_norm import rms_norm, rms_norm_twin
from qtts.kernels.rope_cache import qk_norm_rope_cache, qk_norm_rope_cache_twin
from qtts.kernels.silu_mul import silu_mul, silu_mul_twin

HAS_TRITON = importlib.util.find_spec("triton") is not None
# Kernel vs twin: the kernels round where the twin rounds, so a narrow dtype differs at most by
# one rounding flipped by fp32 noise (sum order, rsqrt, exp): one ulp of that dtype, relative.
# fp32 has no intermediate rounding to mirror; its noise is a few ulps of values of order 1-10.
TOLERANCE = {"float32": 1e-5, "float16": 2**-10, "bfloat16": 2**-7}

_SCRIPT = r"""
import json, sys, torch
from qtts.kernels.backend import is_interpreted
from qtts.kernels.rms_norm import _rms_norm_kernel, rms_norm_triton, rms_norm_twin
from qtts.kernels.silu_mul import silu_mul_triton, silu_mul_twin
from qtts.kernels.rope_cache import qk_norm_rope_cache_triton, qk_norm_rope_cache_twin
from qtts.kernels.rope_cache import qk_norm_rope_prefill_triton, qk_norm_rope_prefill_twin
assert is_interpreted(_rms_norm_kernel), "TRITON_INTERPRET=1 did not reach triton"

def rel(a, b):
    scale = b.float().abs().clamp_min(1.0)
    return ((a.float() - b.float()).abs() / scale).max().item()

out = {}
g = torch.Generator().manual_seed(0)
for name in ("float32", "float16", "bfloat16"):
    dt = getattr(torch, name)
    x = (3 * torch.randn(4, 5, 200, generator=g)).to(dt)[:, ::2]  # strided rows, odd width
    w = (1 + 0.1 * torch.randn(200, generator=g)).to(dt)
    out[f"rms_norm/{name}"] = rel(rms_norm_triton(x, w, 1e-6), rms_norm_twin(x, w, 1e-6))
    gu = (2 * torch.randn(7, 2 * 1500, generator=g)).to(dt)  # I > one block of columns
    out[f"silu_mul/{name}"] = rel(silu_mul_triton(gu), silu_mul_twin(gu))
    for tokens in (1, 2):
        b, h, hk, d, s = 3, 8, 2, 32, 12
        qkv = (2 * torch.randn(b, tokens, (h + 2 * hk) * d, generator=g)).to(dt)
        qw, kw = [(1 + 0.1 * torch.randn(d, generator=g)).to(dt) for _ in range(2)]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        f = torch.arange(s).float()[:, None] * inv
        cos, sin = f.cos().to(dt), f.sin().to(dt)
        if tokens == 1:
            pos = torch.tensor([0, 5, 11])[:, None]  # [B, 1]: each slot its own length
        else:
            pos = torch.arange(tokens).expand(b, tokens)  # stride 0 along B, as the predictor
        start = torch.randn(2, 2, b, hk, s, d, generator=g).to(dt)  # [k|v, Ly, B, Hk, S, D]
        caches = [start.clone(), start.clone()]  # kernel's, twin's
        got = qk_norm_rope_cache_triton(qkv, qw, kw, cos, sin, pos, caches[0][0, 1],
                                        caches[0][1, 1], h, 1e-6)
        want = qk_norm_rope_cache_twin(qkv, qw, kw, cos, sin, pos, caches[1][0, 1],
                                       caches[1][1, 1], h, 1e-6)
        out[f"rope_cache_q/{tokens}/{name}"] = rel(got, want)
        out[f"rope_cache_kv/{tokens}/{name}"] = rel(caches[0], caches[1])
    # The prefill form: 3 prompts of 5 positions into slots 4, 0, 2 of 5, out of order.
    t, rows = 5, torch.tensor([4, 0, 2])
    qkv = (2 * torch.randn(b, t, (h + 2 * hk) * d, generator=g)).to(dt)
    pos = torch.arange(t).expand(b, t)
    start = torch.randn(2, 2, 5, hk, s, d, generator=g).to(dt)  # [k|v, Ly, slots, Hk, S, D]
    caches = [start.clone(), start.clone()]
    got = qk_norm_rope_prefill_triton(qkv, qw, kw, cos, sin, pos, caches[0][0, 1],
                                      caches[0][1, 1], rows, h, 1e-6)
    want = qk_norm_rope_prefill_twin(qkv, qw, kw, cos, sin, pos, caches[1][0, 1],
                                     caches[1][1, 1], rows, h, 1e-6)
    for part, a, w in zip("qkv", got, want):
        out[f"rope_prefill_{part}/{name}"] = rel(a, w)
    out[f"rope_prefill_cache/{name}"] = rel(caches[0], caches[1])
    out[f"rope_prefill_rows_only/{name}"] = float(torch.equal(caches[0][:, :, [1, 3]],
                                                              start[:, :, [1, 3]]))
    # Checked: a position past the table/cache (s=12) raises and leaves the cache as it was.
    from qtts.kernels.rope_cache import checked_positions
    cache = start.clone()
    with checked_positions():
        qk_norm_rope_cache_triton(qkv[:, :1], qw, kw, cos, sin, torch.tensor([[0], [5], [11]]),
                                  cache[0, 1], cache[1, 1], h, 1e-6)  # in range: runs
        cache = start.clone()
        try:
            qk_norm_rope_cache_triton(qkv[:, :1], qw, kw, cos, sin,
                                      torch.tensor([[0], [5], [12]]), cache[0, 1], cache[1, 1],
                                      h, 1e-6)
            out[f"checked_raises/{name}"] = 0.0
        except IndexError:
            out[f"checked_raises/{name}"] = 1.0
    out[f"checked_cache_kept/{name}"] = float(torch.equal(cache, start))
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def kernel_errors():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("case", ["rms_norm", "silu_mul", "rope_cache_q/1", "rope_cache_kv/1",
                                  "rope_cache_q/2", "rope_cache_kv/2", "rope_prefill_q",
                                  "rope_prefill_k", "rope_prefill_v",
                                  "rope_prefill_cache"])  # fmt: skip
def test_kernel_equals_its_twin(kernel_errors, case, dtype):
    assert kernel_errors[f"{case}/{dtype}"] <= TOLERANCE[dtype]


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_the_prefill_kernel_writes_only_its_slots_rows(kernel_errors, dtype):
    assert kernel_errors[f"rope_prefill_rows_only/{dtype}"] == 1.0


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_the_checked_kernel_refuses_a_position_out_of_range(kernel_errors, dtype):
    assert kernel_errors[f"checked_raises/{dtype}"] == 1.0
    assert kernel_errors[f"checked_cache_kept/{dtype}"] == 1.0


def test_the_ops_run_their_twins_off_cuda_and_their_shapes_on_meta():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(3, 2, 16, generator=g), torch.randn(16, generator=g)
    assert torch.equal(rms_norm(x, w, 1e-6), rms_norm_twin(x, w, 1e-6))
    gu = torch.randn(3, 10, generator=g)
    assert torch.equal(silu_mul(gu), silu_mul_twin(gu))
    qkv = torch.randn(2, 1, (4 + 2 * 2) * 8, generator=g)
    qw, kw = torch.randn(8, generator=g), torch.randn(8, generator=g)
    cos, sin = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    pos = torch.tensor([[1], [4]])
    caches = [torch.zeros(2, 2, 6, 8) for _ in range(4)]
    q1 = qk_norm_rope_cache(qkv, qw, kw, cos, sin, pos, caches[0], caches[1], 4, 1e-6)
    q2 = qk_norm_rope_cache_twin(qkv, qw, kw, cos, sin, pos, caches[2], caches[3], 4, 1e-6)
    assert torch.equal(q1, q2) and torch.equal(caches[0], caches[2])
    assert torch.equal(caches[1], caches[3]) and caches[1][1, :, 4].abs().sum() > 0
    assert caches[1][1, :, 3].abs().sum() == 0  # only the token's own position is written
    meta = qk_norm_rope_cache(qkv.to("meta"), qw.to("meta"), kw.to("meta"), cos.to("meta"),
                              sin.to("meta"), pos.to("meta"), *(c.to("meta") for c in caches[:2]),
                              4, 1e-6)  # fmt: skip
    assert meta.shape == (2, 4, 1, 8) and meta.is_meta
    assert silu_mul(gu.to("meta")).shape == (3, 5)
    assert rms_norm(x.to("meta"), w.to("meta"), 1e-6).shape == x.shape
