"""The decoder-tail kernel (last SnakeBeta, conv to one channel, clamp) == its torch twin under
TRITON_INTERPRET=1, in fp32 and bf16, on rows longer than one block and not a multiple of it, a
row shorter than the conv's reach, a width that is not a multiple of the channel chunk, a trimmed
input (row stride past T) and audio that clamps; the twin == the decoder's own last layers, bit
for bit; and a decoder with the op installed leaves a CPU to its layers.

Triton fixes interpreter mode at its first import, so the kernel runs in ONE subprocess that also
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

from qtts.core.model.codec_modules import SNAKE_EPS
from qtts.kernels.snake_conv_out import snake_conv_out, snake_conv_out_twin

HAS_TRITON = importlib.util.find_spec("triton") is not None
CASES = ("long_row", "short_row", "odd_width", "trimmed", "clamped")
# Kernel vs the twin in fp32 on the same inputs: sums of 7 x 96 terms in another order.
FP32_TOLERANCE = 1e-5
# Kernel in bf16 vs the twin in fp32 on the same (bf16) inputs: one rounding of audio in [-1, 1],
# 2^-9 of it; the eager twin rounds SnakeBeta and the conv's output too, and must be no closer.
BF16_TOLERANCE = 2**-8

_SCRIPT = r"""
import json, sys, torch
from qtts.kernels.backend import is_interpreted
from qtts.kernels.snake_conv_out import (_snake_conv_out_kernel, snake_conv_out_triton,
                                        snake_conv_out_twin)
assert is_interpreted(_snake_conv_out_kernel), "TRITON_INTERPRET=1 did not reach triton"

def err(a, b):
    return (a.float() - b.float()).abs().max().item()

out = {}
g = torch.Generator().manual_seed(0)
shapes = {  # name: (x [B, C, T], filter gain)
    "long_row": (lambda: torch.randn(2, 96, 600, generator=g), 0.3),  # 3 blocks, the last partial
    "short_row": (lambda: torch.randn(1, 96, 5, generator=g), 0.3),  # T < the 7 taps
    "odd_width": (lambda: torch.randn(2, 40, 300, generator=g), 0.3),  # chunks of 16: 40 = 2.5
    "trimmed": (lambda: torch.randn(2, 96, 303, generator=g)[..., :300], 0.3),  # row stride 303
    "clamped": (lambda: torch.randn(2, 96, 300, generator=g), 8.0),  # most samples past +-1
}
for name in ("float32", "bfloat16"):
    dt = getattr(torch, name)
    for case, (make, gain) in shapes.items():
        x = make().to(dt)
        c = x.shape[1]
        la, lb = [0.3 * torch.randn(c, generator=g) for _ in "ab"]
        w = gain * torch.randn(1, c, 7, generator=g) / (7 * c) ** 0.5
        bias = torch.tensor([0.01])
        args = lambda d: (x.to(d), la.to(dt).to(d), lb.to(dt).to(d), w.to(dt).to(d),
                          bias.to(dt).to(d), 1e-9)
        got = snake_conv_out_triton(*args(dt))
        exact = snake_conv_out_twin(*args(torch.float32))
        out[f"{case}/{name}"] = err(got, exact)
        out[f"{case}/{name}/eager"] = err(snake_conv_out_twin(*args(dt)), exact)
        shape = (x.shape[0], x.shape[2])
        out[f"{case}/{name}/layout"] = float(got.is_contiguous() and got.shape == shape
                                             and got.dtype == dt)
        out[f"{case}/{name}/clamped_share"] = (exact.abs() >= 1.0).float().mean().item()
empty = snake_conv_out_triton(torch.empty(0, 4, 10), torch.zeros(4), torch.zeros(4),
                              torch.zeros(1, 4, 7), torch.zeros(1), 1e-9)
out["empty"] = float(empty.shape == (0, 10))
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
def test_kernel_equals_its_twin(kernel_errors, case):
    assert kernel_errors[f"{case}/float32"] <= FP32_TOLERANCE
    got, eager = kernel_errors[f"{case}/bfloat16"], kernel_errors[f"{case}/bfloat16/eager"]
    assert got <= BF16_TOLERANCE and got <= eager, f"kernel {got} vs the eager twin {eager}"
    for dtype in ("float32", "bfloat16"):
        assert kernel_errors[f"{case}/{dtype}/layout"] == 1.0


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_the_clamp_case_clamps_and_an_empty_batch_launches_nothing(kernel_errors):
    assert kernel_errors["clamped/float32/clamped_share"] > 0.3  # the case tests the clamp
    assert kernel_errors["long_row/float32/clamped_share"] < 0.05
    assert kernel_errors["empty"] == 1.0


def _decoder():
    from qtts.core.model.codec import SpeechDecoder
    from qtts.core.model.sizes import decoder_config

    torch.manual_seed(0)
    return SpeechDecoder(decoder_config("small")).eval()


def test_the_decoders_tail_is_the_twin_bit_for_bit():
    """One computation: the decoder's last SnakeBeta, conv and clamp, and the twin (the op off
    CUDA) on the same activation."""
    decoder = _decoder()
    *_, snake, conv = decoder.decoder
    with torch.no_grad():
        for p in (snake.alpha, snake.beta):
            p.normal_(std=0.3)
        x = 3 * torch.randn(2, snake.alpha.shape[0], 40)  # [B, C, T]
        want = conv(snake(x)).clamp(-1.0, 1.0).squeeze(1)
        args = (x, snake.alpha, snake.beta, conv.conv.weight, conv.conv.bias, SNAKE_EPS)
        assert torch.equal(snake_conv_out_twin(*args), want)
        assert torch.equal(snake_conv_out(*args), want)


def test_an_installed_tail_leaves_cpu_to_the_layers():
    def refuse(*_):
        raise AssertionError("the CUDA op ran on a CPU tensor")

    decoder = _decoder()
    codes = torch.randint(0, decoder.cfg.codebook_size, (1, decoder.cfg.num_quantizers, 3))
    with torch.no_grad():
        want = decoder(codes)
        decoder.cuda_tail = refuse
        assert torch.equal(decoder(codes), want)


def test_the_op_gives_meta_calls_their_shape():
    x, c = torch.empty(3, 6, 11, device="meta"), torch.empty(6, device="meta")
    w, b = torch.empty(1, 6, 7, device="meta"), torch.empty(1, device="meta")
    got = snake_conv_out(x, c, c, w, b, SNAKE_EPS)
    assert got.shape == (3, 11) and got.is_meta
