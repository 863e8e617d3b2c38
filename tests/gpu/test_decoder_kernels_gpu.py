"""The fused speech-decoder kernels compiled for the GPU: the residual unit (tensor-core products)
and the decoder's tail == their torch twins on CUDA tensors at the decoder's real widths and a
full window's samples, in fp32 and bf16; each op replays in a CUDA graph; and a real-size decoder
with every kernel installed (with_kernels, what a job runs) gives the layers' audio within bf16's
rounding. The CPU twins of this file are tests/unit/kernels/test_residual_unit_kernel.py and
test_snake_conv_out_kernel.py (interpreter)."""

import copy
import importlib.util

import pytest
import torch

from qtts.core.model.codec_modules import SNAKE_EPS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]

# Kernel vs the twin in fp32 on the same inputs (IEEE products, no TF32 on either side), relative
# to values of 1 and more; in bf16 against the fp32 twin, as the interpreter test: the kernel must
# be within BF16 and no further than the eager bf16 twin (which rounds after every op).
FP32 = 1e-4
BF16 = 0.05
TAIL_BF16 = 2**-8  # one rounding of audio in [-1, 1]
# Whole decoder, bf16 with the kernels vs bf16 without them, both against fp32 without them:
# the signal-to-noise ratio of each, in dB. The kernels round less, so they must not be worse by
# more than this margin (random weights; a real decoder's bound is qtts doctor's 25 dB).
SNR_MARGIN_DB = 1.0


def _rel(a, b) -> float:
    return ((a.float() - b.float()).abs() / b.float().abs().clamp_min(1.0)).max().item()


def _unit_args(c, t, dilation, dtype, seed, batch=2):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def r(*s, std):
        return (std * torch.randn(*s, device="cuda", generator=g)).to(dtype)

    x = r(batch, c, t, std=2.0)
    return (x, r(c, std=0.3), r(c, std=0.3), r(c, c, 7, std=(7 * c) ** -0.5), r(c, std=0.1),
            dilation, r(c, std=0.3), r(c, std=0.3), r(c, c, 1, std=c**-0.5), r(c, std=0.1),
            SNAKE_EPS)  # fmt: skip


def _as(args, dtype):
    return tuple(a.to(dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


@pytest.fixture(autouse=True)
def no_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize(("c", "t", "dilation"), [(96, 325 * 1920, 9), (192, 325 * 640, 1),
                                                  (96, 1000, 3), (192, 37, 9)])  # fmt: skip
def test_residual_unit_kernel_equals_its_twin(c, t, dilation):
    from qtts.kernels.residual_unit import residual_unit_triton, residual_unit_twin

    args = _unit_args(c, t, dilation, torch.float32, seed=0)
    assert _rel(residual_unit_triton(*args), residual_unit_twin(*args)) <= FP32
    bf16 = _as(args, torch.bfloat16)
    exact = residual_unit_twin(*_as(bf16, torch.float32))
    got, eager = residual_unit_triton(*bf16), residual_unit_twin(*bf16)
    assert got.dtype == torch.bfloat16 and got.is_contiguous()
    assert _rel(got, exact) <= BF16 and _rel(got, exact) <= _rel(eager, exact)


def test_snake_conv_out_kernel_equals_its_twin():
    from qtts.kernels.snake_conv_out import snake_conv_out_triton, snake_conv_out_twin

    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(4, 96, 325 * 1920, device="cuda", generator=g)
    la, lb = (0.3 * torch.randn(96, device="cuda", generator=g) for _ in "ab")
    w = 0.3 * torch.randn(1, 96, 7, device="cuda", generator=g) / (7 * 96) ** 0.5
    bias = torch.full((1,), 0.01, device="cuda")
    args = (x, la, lb, w, bias, SNAKE_EPS)
    assert (snake_conv_out_triton(*args) - snake_conv_out_twin(*args)).abs().max() <= FP32
    bf16 = _as(args, torch.bfloat16)
    exact = snake_conv_out_twin(*_as(bf16, torch.float32))
    assert (snake_conv_out_triton(*bf16).float() - exact).abs().max() <= TAIL_BF16


def test_the_ops_replay_in_a_graph():
    from qtts.kernels.residual_unit import residual_unit, residual_unit_triton

    args = _unit_args(96, 4000, 3, torch.bfloat16, seed=2)
    first = residual_unit(*args)  # compiles the kernel before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = residual_unit(*args)
    args[0].copy_(_unit_args(96, 4000, 3, torch.bfloat16, seed=3)[0])
    graph.replay()
    assert torch.equal(out, residual_unit_triton(*args))
    assert not torch.equal(out, first)


def _snr_db(got: torch.Tensor, want: torch.Tensor) -> float:
    noise = (got.float() - want.float()).pow(2).sum()
    return 10 * torch.log10(want.float().pow(2).sum() / noise.clamp_min(1e-30)).item()


def test_a_real_size_decoder_with_every_kernel_matches_its_layers():
    """The 0.6b decoder (random weights, as the bench builds it): fp32 with kernels == fp32
    without (IEEE products on both sides); in bf16 the kernels' audio is as close to fp32 as the
    layers' own bf16 audio, within SNR_MARGIN_DB."""
    from qtts.core.bench.throughput import random_models
    from qtts.core.engine.decoder_kernels import with_kernels

    _, _, decoder = random_models("0.6b", "cuda", torch.float32)
    codes = torch.randint(0, decoder.cfg.codebook_size, (2, 16, 60), device="cuda")
    with torch.inference_mode():
        exact = decoder(codes)
        kernels_fp32 = with_kernels(copy.deepcopy(decoder))(codes)
        layers = copy.deepcopy(decoder).to(torch.bfloat16)
        layers_bf16 = layers(codes)
        kernels_bf16 = with_kernels(layers)(codes)
    assert exact.abs().max() > 1e-3  # the random decoder makes a signal to compare
    torch.testing.assert_close(kernels_fp32, exact, rtol=0, atol=1e-4)
    assert _snr_db(kernels_bf16, exact) >= _snr_db(layers_bf16, exact) - SNR_MARGIN_DB
