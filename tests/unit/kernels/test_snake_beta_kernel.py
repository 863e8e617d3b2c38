"""The SnakeBeta kernel == its torch twin under TRITON_INTERPRET=1, in fp32, fp16 and bf16, on a
row longer than one block and not a multiple of it, a row shorter than one, a decoder-wide B * C,
a trimmed transposed conv's output (row stride past T) and a permuted input (copied); and the twin
== the speech decoder's own SnakeBeta, bit for bit, which stays the formula on CPU.

Triton fixes interpreter mode at its first import, so the kernel runs in ONE subprocess that also
computes the twins on the same inputs and reports the largest difference per case.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from qtts.core.model.codec_modules import SNAKE_EPS, SnakeBeta
from qtts.kernels.snake_beta import snake_beta, snake_beta_twin

HAS_TRITON = importlib.util.find_spec("triton") is not None
CASES = ("long_row", "short_row", "wide", "trimmed", "permuted", "padded")
# Kernel vs the twin run in fp32 on the same inputs and rounded once to the dtype, which is what
# the kernel computes: the two round differently only where fp32 noise (sin, exp) straddles a
# rounding boundary, one ulp of the narrow dtype, relative; fp32 is a few ulps of values of 1-10.
TOLERANCE = {"float32": 1e-5, "float16": 2**-10, "bfloat16": 2**-7}
# Kernel vs the twin run in the narrow dtype itself, which rounds after each of its ops: e^alpha
# and x * e^alpha rounded move sin's argument by up to 2^-8 of itself in bf16, and sin^2 passes
# that on times alpha / beta relative to |x|; with log scales of 0.1 * N(0, 1) (as the tiny
# checkpoint draws) that and the other roundings reached 0.023 in bf16 (3 ulps) and 0.0034 in
# fp16. The kernel is the more exact of the two (TOLERANCE above); this is the twin's own error.
EAGER_TOLERANCE = {"float32": 1e-5, "float16": 2**-7, "bfloat16": 2**-4}

_SCRIPT = r"""
import json, sys, torch
from qtts.kernels.backend import is_interpreted
from qtts.kernels.snake_beta import _snake_beta_kernel, snake_beta_triton, snake_beta_twin
assert is_interpreted(_snake_beta_kernel), "TRITON_INTERPRET=1 did not reach triton"

def rel(a, b):
    scale = b.float().abs().clamp_min(1.0)
    return ((a.float() - b.float()).abs() / scale).max().item()

out = {}
g = torch.Generator().manual_seed(0)
for name in ("float32", "float16", "bfloat16"):
    dt = getattr(torch, name)
    inputs = {
        "long_row": 3 * torch.randn(2, 3, 1500, generator=g),  # two blocks, the second partial
        "short_row": 3 * torch.randn(1, 5, 37, generator=g),
        "wide": 3 * torch.randn(1, 1536, 24, generator=g),  # the decoder's widest SnakeBeta
        "trimmed": (3 * torch.randn(2, 4, 1030, generator=g))[..., :1027],  # row stride 1030
        "permuted": (3 * torch.randn(2, 50, 6, generator=g)).transpose(1, 2),  # T stride 6
        "padded": 3 * torch.randn(2, 3, 1100, generator=g),  # rows of pad + T: two blocks
    }
    for case, x in inputs.items():
        x = x.to(dt)
        la, lb = [(0.1 * torch.randn(x.shape[1], generator=g)).to(dt) for _ in "ab"]
        pad = 54 if case == "padded" else 0  # a dilation-9 conv's left padding, written too
        got = snake_beta_triton(x, la, lb, 1e-9, pad)
        once = snake_beta_twin(x.float(), la.float(), lb.float(), 1e-9, pad).to(dt)
        out[f"{case}/{name}"] = rel(got, once)
        out[f"{case}/{name}/eager"] = rel(got, snake_beta_twin(x, la, lb, 1e-9, pad))
        shape = (*x.shape[:2], pad + x.shape[2])
        zeros = bool((got[..., :pad] == 0).all())
        out[f"{case}/{name}/contiguous"] = float(got.is_contiguous() and got.shape == shape
                                                 and zeros)
empty = snake_beta_triton(torch.empty(0, 4, 10), torch.zeros(4), torch.zeros(4), 1e-9)
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
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_its_twin_rounded_once(kernel_errors, case, dtype):
    assert kernel_errors[f"{case}/{dtype}"] <= TOLERANCE[dtype]
    assert kernel_errors[f"{case}/{dtype}/contiguous"] == 1.0


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("dtype", list(EAGER_TOLERANCE))
@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_the_eager_twin_within_its_rounding(kernel_errors, case, dtype):
    assert kernel_errors[f"{case}/{dtype}/eager"] <= EAGER_TOLERANCE[dtype]


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_an_empty_batch_launches_nothing(kernel_errors):
    assert kernel_errors["empty"] == 1.0


def _snake(channels: int, dtype: torch.dtype, seed: int) -> tuple[SnakeBeta, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    act = SnakeBeta(channels)
    with torch.no_grad():
        act.alpha.copy_(0.3 * torch.randn(channels, generator=g))
        act.beta.copy_(0.3 * torch.randn(channels, generator=g))
    x = 3 * torch.randn(2, channels, 50, generator=g)  # [B, C, T]
    return act.to(dtype), x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_decoders_snake_beta_is_the_twin_bit_for_bit(dtype):
    """One formula: the module's and the twin's (with the decoder's eps) agree exactly."""
    act, x = _snake(16, dtype, seed=3)
    with torch.no_grad():
        want = snake_beta_twin(x, act.alpha, act.beta, SNAKE_EPS)
        assert torch.equal(act(x), want)
        assert torch.equal(snake_beta(x, act.alpha, act.beta, SNAKE_EPS), want)  # the op off CUDA


def test_an_installed_cuda_op_leaves_cpu_to_the_formula():
    def refuse(*_):
        raise AssertionError("the CUDA op ran on a CPU tensor")

    act, x = _snake(8, torch.float32, seed=4)
    act.cuda_op = refuse
    with torch.no_grad():
        assert torch.equal(act(x), snake_beta_twin(x, act.alpha, act.beta, SNAKE_EPS))


def test_the_op_gives_meta_calls_their_shape():
    x, c = torch.empty(3, 6, 11, device="meta"), torch.empty(6, device="meta")
    got = snake_beta(x, c, c, SNAKE_EPS)
    assert got.shape == (3, 6, 11) and got.is_meta
    assert snake_beta(x, c, c, SNAKE_EPS, 4).shape == (3, 6, 15)


def test_the_padded_op_is_snake_then_the_causal_padding():
    """What snake_into_conv hands a causal conv on CUDA: the module's SnakeBeta, then F.pad's
    zeros; the op off CUDA, bit for bit."""
    import torch.nn.functional as F

    act, x = _snake(8, torch.float32, seed=5)
    with torch.no_grad():
        want = F.pad(act(x), (6, 0))
        assert torch.equal(snake_beta(x, act.alpha, act.beta, SNAKE_EPS, 6), want)
        assert torch.equal(snake_beta_twin(x, act.alpha, act.beta, SNAKE_EPS, 6), want)


def test_the_engine_installs_the_op_in_every_snake_of_a_decoder():
    """What the synthesizer, the bench and the doctor call before decoding on a device."""
    from qtts.core.engine.vocoder.decoder_kernels import with_kernels
    from qtts.core.model.codec import SpeechDecoder
    from qtts.core.model.sizes import decoder_config

    decoder = SpeechDecoder(decoder_config("small"))
    snakes = [m for m in decoder.modules() if isinstance(m, SnakeBeta)]
    assert snakes and all(m.cuda_op is None for m in snakes)
    assert with_kernels(decoder) is decoder
    assert all(m.cuda_op is not None for m in snakes)
    x = torch.randn(2, snakes[0].alpha.shape[0], 5)
    assert torch.equal(snakes[0].cuda_op(x, snakes[0].alpha, snakes[0].beta, SNAKE_EPS),
                       snake_beta(x, snakes[0].alpha, snakes[0].beta, SNAKE_EPS))  # fmt: skip
    assert SpeechDecoder(decoder_config("small")).decoder[-2].cuda_op is None  # per decoder
    copied = copy.deepcopy(decoder)  # the doctor copies decoders: the kernel goes with them
    assert all(m.cuda_op is snakes[0].cuda_op for m in copied.modules() if isinstance(m, SnakeBeta))
