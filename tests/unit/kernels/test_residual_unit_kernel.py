"""The residual-unit kernel == its torch twin under TRITON_INTERPRET=1, in fp32 and bf16, at the
decoder's fused widths (96 and 192) and dilations (1, 3, 9), on rows longer than one block and not
a multiple of it, a row shorter than the causal reach of its taps, a width that is not a power of
two nor a multiple of the channel chunk, a trimmed transposed conv's output (row stride past T)
and a permuted input (copied); the twin == the decoder's own ResidualUnit, bit for bit; and the
engine installs the op in the units it fuses and leaves a CPU to the layers.

Triton fixes interpreter mode at its first import, so the kernel runs in ONE subprocess that also
computes the twins on the same inputs and reports the largest difference per case. The
interpreter's bf16 products are wrong, so there the kernel's products take their bf16 operands
exactly in fp32, which is what tensor cores compute; tests/gpu/test_decoder_kernels_gpu.py runs
the bf16 tensor-core path itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from qtts.core.model.codec_modules import SNAKE_EPS, ResidualUnit
from qtts.kernels.residual_unit import residual_unit, residual_unit_twin

HAS_TRITON = importlib.util.find_spec("triton") is not None
CASES = ("w96_d1", "w96_d9_short", "w192_d3", "w40_d3", "trimmed", "permuted")
# Kernel vs the twin in fp32 on the same inputs: the same sums in another order (seven taps of up
# to 192 products each), a few ulps of values of order 1-10.
FP32_TOLERANCE = 1e-5
# Kernel in bf16 vs the twin in fp32 on the same (bf16) inputs, relative to values of 1 and more:
# the kernel rounds the two products' inputs and its output to bf16, three roundings of 2^-9
# each, carried through sums of 7 x 96 to 7 x 192 terms; seen at most 0.035. The eager twin in
# bf16 rounds after every op and was seen at 0.028-0.052 on the same inputs: the kernel must be at
# least as close as it.
BF16_TOLERANCE = 0.05

_SCRIPT = r"""
import json, sys, torch
from qtts.kernels.backend import is_interpreted
from qtts.kernels.residual_unit import (_residual_unit_kernel, residual_unit_triton,
                                       residual_unit_twin)
assert is_interpreted(_residual_unit_kernel), "TRITON_INTERPRET=1 did not reach triton"

def rel(a, b):
    return ((a.float() - b.float()).abs() / b.float().abs().clamp_min(1.0)).max().item()

def params(c, g):
    scale = lambda *s, std: std * torch.randn(*s, generator=g)
    return dict(alpha1=scale(c, std=0.3), beta1=scale(c, std=0.3),
                w1=scale(c, c, 7, std=(7 * c) ** -0.5), b1=scale(c, std=0.1),
                alpha2=scale(c, std=0.3), beta2=scale(c, std=0.3),
                w2=scale(c, c, 1, std=c ** -0.5), b2=scale(c, std=0.1))

out = {}
g = torch.Generator().manual_seed(0)
shapes = {  # name: (x [B, C, T] before any cut, dilation)
    "w96_d1": (lambda: torch.randn(2, 96, 300, generator=g), 1),  # 3 blocks, the last partial
    "w96_d9_short": (lambda: torch.randn(1, 96, 40, generator=g), 9),  # T < the taps' reach, 54
    "w192_d3": (lambda: torch.randn(3, 192, 70, generator=g), 3),  # 2 blocks of 64
    "w40_d3": (lambda: torch.randn(2, 40, 50, generator=g), 3),  # padded to 64, chunks of 32
    "trimmed": (lambda: torch.randn(2, 96, 133, generator=g)[..., :130], 9),  # row stride 133
    "permuted": (lambda: torch.randn(2, 50, 96, generator=g).transpose(1, 2), 3),  # T stride 96
}
for name in ("float32", "bfloat16"):
    dt = getattr(torch, name)
    for case, (make, dilation) in shapes.items():
        x = (2 * make()).to(dt)
        p = {k: v.to(dt) for k, v in params(x.shape[1], g).items()}
        args = lambda d: (x.to(d), p["alpha1"].to(d), p["beta1"].to(d), p["w1"].to(d),
                          p["b1"].to(d), dilation, p["alpha2"].to(d), p["beta2"].to(d),
                          p["w2"].to(d), p["b2"].to(d), 1e-9)
        got = residual_unit_triton(*args(dt))
        exact = residual_unit_twin(*args(torch.float32))
        out[f"{case}/{name}"] = rel(got, exact)
        out[f"{case}/{name}/eager"] = rel(residual_unit_twin(*args(dt)), exact)
        out[f"{case}/{name}/layout"] = float(got.is_contiguous() and got.shape == x.shape
                                             and got.dtype == dt)
z = torch.zeros(4)
empty = residual_unit_triton(torch.empty(0, 4, 10), z, z, torch.zeros(4, 4, 7), z, 1, z, z,
                             torch.zeros(4, 4, 1), z, 1e-9)
out["empty"] = float(empty.shape == (0, 4, 10))
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
@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_its_twin_in_fp32(kernel_errors, case):
    assert kernel_errors[f"{case}/float32"] <= FP32_TOLERANCE
    assert kernel_errors[f"{case}/float32/layout"] == 1.0


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("case", CASES)
def test_kernel_in_bf16_is_as_close_to_fp32_as_the_eager_twin(kernel_errors, case):
    got, eager = kernel_errors[f"{case}/bfloat16"], kernel_errors[f"{case}/bfloat16/eager"]
    assert got <= BF16_TOLERANCE
    assert got <= eager, f"kernel {got} vs the eager twin {eager}"
    assert kernel_errors[f"{case}/bfloat16/layout"] == 1.0


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_an_empty_batch_launches_nothing(kernel_errors):
    assert kernel_errors["empty"] == 1.0


def _unit(dim: int, dilation: int, dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    unit = ResidualUnit(dim, dilation)
    with torch.no_grad():
        for p in unit.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    x = 2 * torch.randn(2, dim, 60, generator=g)  # [B, C, T]
    return unit.to(dtype), x.to(dtype)


def _args(unit: ResidualUnit, x: torch.Tensor) -> tuple:
    c1, c2 = unit.conv1.conv, unit.conv2.conv
    return (x, unit.act1.alpha, unit.act1.beta, c1.weight, c1.bias, c1.dilation[0],
            unit.act2.alpha, unit.act2.beta, c2.weight, c2.bias, SNAKE_EPS)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_decoders_residual_unit_is_the_twin_bit_for_bit(dtype):
    """One computation: the module's layers and the twin (with the decoder's eps) agree exactly,
    and the op off CUDA is the twin."""
    unit, x = _unit(16, 3, dtype, seed=3)
    with torch.no_grad():
        want = unit(x)
        assert torch.equal(residual_unit_twin(*_args(unit, x)), want)
        assert torch.equal(residual_unit(*_args(unit, x)), want)


def test_an_installed_cuda_op_leaves_cpu_to_the_layers():
    def refuse(*_):
        raise AssertionError("the CUDA op ran on a CPU tensor")

    unit, x = _unit(8, 1, torch.float32, seed=4)
    with torch.no_grad():
        want = unit(x)
        unit.cuda_op = refuse
        assert torch.equal(unit(x), want)


def test_the_op_gives_meta_calls_their_shape():
    x = torch.empty(3, 6, 11, device="meta")
    c, w1, w2 = (torch.empty(*s, device="meta") for s in ((6,), (6, 6, 7), (6, 6, 1)))
    got = residual_unit(x, c, c, w1, c, 3, c, c, w2, c, SNAKE_EPS)
    assert got.shape == (3, 6, 11) and got.is_meta


def test_the_engine_installs_the_op_in_the_narrow_units_only():
    """What the synthesizer, the bench and the doctor call before decoding on a device: the
    units up to FUSED_UNIT_CHANNELS wide take the op, wider ones keep cuDNN's convolutions."""
    from qtts.core.engine.decoder_kernels import FUSED_UNIT_CHANNELS, with_kernels
    from qtts.core.model.codec import SpeechDecoder
    from qtts.core.model.sizes import decoder_config

    decoder = with_kernels(SpeechDecoder(decoder_config("0.6b")).to("meta"))
    units = [m for m in decoder.modules() if isinstance(m, ResidualUnit)]
    widths = {m.conv1.conv.in_channels: m.cuda_op is not None for m in units}
    assert widths == {768: False, 384: False, 192: True, 96: True}
    assert FUSED_UNIT_CHANNELS == 192
    assert decoder.cuda_tail is not None
    bare = with_kernels(SpeechDecoder(decoder_config("0.6b")).to("meta"), unit_channels=0,
                        tail=False)  # fmt: skip
    assert all(m.cuda_op is None for m in bare.modules() if isinstance(m, ResidualUnit))
    assert bare.cuda_tail is None
