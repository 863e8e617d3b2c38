"""The speech decoder's frame-rate convolutions as matrix products
(core/engine/vocoder/conv_gemm.py) == the modules' own convolutions, in fp32 on CPU: causal convs at
the decoder's kernel sizes and a dilation, transposed convs with kernel = stride and 2 x stride (the
overlap added), with and without bias, on inputs of any layout and at one row; and the decoder's
chosen convolutions take the products on CUDA only. The GPU twin of these checks (real sizes) is
tests/gpu/test_decoder_fast_path_gpu.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from qtts.core.engine.vocoder.conv_gemm import causal_conv, causal_conv_transpose
from qtts.core.model.codec_modules import CausalConv1d, CausalConvTranspose1d

# The same sums in another order (K * C terms of order 1): a few fp32 ulps of values up to ~10.
FP32 = 1e-5


def _close(got, want):
    torch.testing.assert_close(got, want, rtol=FP32, atol=FP32)


@pytest.mark.parametrize(("c_in", "c_out", "kernel", "dilation"), [(32, 48, 7, 1), (24, 40, 3, 1),
                                                                   (16, 16, 7, 3)])  # fmt: skip
def test_causal_conv_is_the_module_conv(c_in, c_out, kernel, dilation):
    torch.manual_seed(0)
    conv = CausalConv1d(c_in, c_out, kernel, dilation=dilation)
    x = torch.randn(3, c_in, 29)
    with torch.no_grad():
        xp = F.pad(x, (conv.left_pad, 0))
        _close(causal_conv(xp, conv.conv.weight, conv.conv.bias, dilation), conv(x))
        no_bias = causal_conv(xp, conv.conv.weight, None, dilation)
        _close(no_bias, conv(x) - conv.conv.bias[:, None])
        # an input laid out [B, T, C] (a transformer's output, transposed back)
        xt = xp.transpose(1, 2).contiguous().transpose(1, 2)
        _close(causal_conv(xt, conv.conv.weight, conv.conv.bias, dilation), conv(x))
        one = causal_conv(xp[:1], conv.conv.weight, conv.conv.bias, dilation)  # one row
        _close(one, conv(x[:1]))


@pytest.mark.parametrize(("kernel", "stride"), [(16, 8), (6, 3), (2, 2)])
def test_causal_conv_transpose_is_the_module_conv(kernel, stride):
    torch.manual_seed(1)
    conv = CausalConvTranspose1d(24, 12, kernel, stride)
    x = torch.randn(2, 24, 11)
    with torch.no_grad():
        want = conv(x)
        assert want.shape == (2, 12, 11 * stride)
        _close(causal_conv_transpose(x, conv.conv.weight, conv.conv.bias, stride), want)
        _close(causal_conv_transpose(x.transpose(1, 2).contiguous().transpose(1, 2),
                                     conv.conv.weight, conv.conv.bias, stride), want)  # fmt: skip
        _close(causal_conv_transpose(x[:1], conv.conv.weight, conv.conv.bias, stride), want[:1])


def test_shapes_the_products_do_not_cover_are_refused():
    with pytest.raises(ValueError, match="kernel of stride"):
        causal_conv_transpose(torch.randn(1, 4, 5), torch.randn(4, 4, 5), None, 2)
    with pytest.raises(ValueError, match="takes 8 channels"):
        causal_conv(torch.randn(1, 4, 9), torch.randn(4, 8, 3), None, 1)


def test_the_frame_rate_convolutions_take_the_products_on_cuda_only():
    """with_kernels installs the products in the chosen convolutions; on CPU tensors the modules
    still run their own layers (the products would refuse nothing, but a CPU keeps its path)."""
    from qtts.core.engine.vocoder.decoder_kernels import frame_rate_convs, with_kernels
    from qtts.core.model.codec import SpeechDecoder
    from qtts.core.model.sizes import decoder_config

    decoder = SpeechDecoder(decoder_config("small")).eval()
    codes = torch.randint(0, decoder.cfg.codebook_size, (1, decoder.cfg.num_quantizers, 3))
    with torch.no_grad():
        want = decoder(codes)
        with_kernels(decoder)
        chosen = frame_rate_convs(decoder)
        assert len(chosen) == 5 and all(c.cuda_op is not None for c in chosen)
        assert torch.equal(decoder(codes), want)  # CPU: the layers, bit for bit
        with_kernels(decoder, gemm=False)
        assert all(c.cuda_op is None for c in chosen)
