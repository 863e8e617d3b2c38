"""The speech decoder's fast path on a GPU (core/engine/vocoder/decoder_kernels.py): the frame-rate
convolutions as cuBLAS products == cuDNN's convolutions at the 0.6b decoder's real shapes, the
SnakeBeta op's causal padding == F.pad, and a real-size decoder with every op installed gives the
layers' audio: equal to float rounding in fp32, and in bf16 as close to fp32 as the layers' own
bf16 audio. The CPU twins are tests/unit/engine/test_conv_gemm.py and
tests/unit/kernels/test_snake_beta_kernel.py."""

import copy

import pytest
import torch
import torch.nn.functional as F

from qtts.core.model.codec_modules import SNAKE_EPS

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="needs CUDA")]  # fmt: skip

FP32 = 1e-4  # another summation order of up to 7 x 1,536 products, no TF32 on either side
# bf16 audio: the signal-to-noise ratio against fp32 of the fast path may fall short of the
# layers' own bf16 audio by at most this (random weights; qtts doctor holds a real decoder to 25 dB)
SNR_MARGIN_DB = 1.0


@pytest.fixture(autouse=True)
def no_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture(scope="module")
def decoder():
    from qtts.core.bench.throughput import random_models

    return random_models("0.6b", "cuda", torch.float32)[2]


def _snr_db(got: torch.Tensor, want: torch.Tensor) -> float:
    noise = (got.float() - want.float()).pow(2).sum().clamp_min(1e-30)
    return 10 * torch.log10(want.float().pow(2).sum() / noise).item()


def test_each_frame_rate_convolution_as_a_product_is_cudnns(decoder):
    from qtts.core.engine.vocoder.conv_gemm import causal_conv, causal_conv_transpose
    from qtts.core.engine.vocoder.decoder_kernels import frame_rate_convs
    from qtts.core.model.codec_modules import CausalConv1d

    with torch.inference_mode():
        for conv in frame_rate_convs(decoder):
            w, b = conv.conv.weight, conv.conv.bias
            for rows in (4, 1):  # one row: the im2col must be a real copy there
                x = torch.randn(rows, w.shape[1] if isinstance(conv, CausalConv1d) else w.shape[0],
                                325 * 4, device="cuda")  # fmt: skip
                if isinstance(conv, CausalConv1d):
                    got = causal_conv(F.pad(x, (conv.left_pad, 0)), w, b, conv.conv.dilation[0])
                else:
                    got = causal_conv_transpose(x, w, b, conv.conv.stride[0])
                want = conv(x)
                scale = want.abs().max().clamp_min(1.0)
                assert ((got - want).abs().max() / scale) <= FP32, (conv, rows)


def test_the_snake_op_writes_the_causal_padding():
    from qtts.kernels.snake_beta import snake_beta

    x = torch.randn(2, 96, 5000, device="cuda", dtype=torch.bfloat16)
    la = lb = torch.zeros(96, device="cuda", dtype=torch.bfloat16)
    padded = snake_beta(x, la, lb, SNAKE_EPS, 54)
    assert torch.equal(padded, F.pad(snake_beta(x, la, lb, SNAKE_EPS), (54, 0)))


def test_a_real_size_decoder_on_the_fast_path_gives_the_layers_audio(decoder):
    from qtts.core.engine.vocoder.decoder_kernels import with_kernels

    codes = torch.randint(0, decoder.cfg.codebook_size, (2, 16, 60), device="cuda")
    with torch.inference_mode():
        exact = decoder(codes)
        fast_fp32 = with_kernels(copy.deepcopy(decoder))(codes)
        layers = copy.deepcopy(decoder).to(torch.bfloat16)
        layers_bf16 = layers(codes)
        fast_bf16 = with_kernels(layers)(codes)
    assert exact.abs().max() > 1e-3  # the random decoder makes a signal to compare
    torch.testing.assert_close(fast_fp32, exact, rtol=0, atol=FP32)
    assert _snr_db(fast_bf16, exact) >= _snr_db(layers_bf16, exact) - SNR_MARGIN_DB
