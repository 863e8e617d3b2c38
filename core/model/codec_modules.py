"""Convolutional layers of the speech-tokenizer decoder: RVQ lookup, causal convs, upsampling.

Owns the layers that turn code indices into latent frames and latent frames into samples
(docs/model.md, "Speech decoder"). Attribute names mirror the checkpoint's tensor names so the
decoder's state_dict loads strictly. Knows nothing of chunking, batching of utterances or files.
All layers are causal: output sample t depends only on inputs at or before t, which is what lets
padded batches and chunked decoding reproduce single-utterance output.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# Floor for a codebook entry's usage count when normalising its running sum (official value).
CODEBOOK_USAGE_EPS = 1e-5
# Keeps SnakeBeta finite when exp(beta) underflows (official value).
SNAKE_EPS = 1e-9


class CausalConv1d(nn.Module):
    """Stride-1 Conv1d padded with (kernel - 1) * dilation zeros on the left only.

    `cuda_op`, when set, serves CUDA tensors in another formulation of the same convolution: a
    callable (padded x, weight, bias, dilation) -> [B, C', T] (core/engine/vocoder/conv_gemm.py's
    matrix product), installed by core/engine/vocoder/decoder_kernels.py. `forward_padded` takes an
    input that already carries the left padding (a SnakeBeta op can write it so: `snake_into_conv`).
    """

    def __init__(self, in_ch: int, out_ch: int, kernel: int, dilation: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(in_ch, out_ch, kernel, dilation=dilation, groups=groups)
        self.left_pad = (kernel - 1) * dilation
        self.cuda_op: Callable[..., torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T] -> [B, C', T]
        return self.forward_padded(F.pad(x, (self.left_pad, 0)))

    def forward_padded(self, xp: torch.Tensor) -> torch.Tensor:  # [B, C, pad + T] -> [B, C', T]
        if xp.is_cuda and self.cuda_op is not None:
            return self.cuda_op(xp, self.conv.weight, self.conv.bias, self.conv.dilation[0])
        return self.conv(xp)


class CausalConvTranspose1d(nn.Module):
    """ConvTranspose1d whose right overhang (kernel - stride samples) is cut: T -> T * stride.

    `cuda_op`, when set, serves CUDA tensors in another formulation of the same trimmed
    convolution: a callable (x, weight, bias, stride) -> [B, C', T * stride]
    (core/engine/vocoder/conv_gemm.py), installed by core/engine/vocoder/decoder_kernels.py.
    """

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_ch, out_ch, kernel, stride=stride)
        self.right_trim = kernel - stride
        self.cuda_op: Callable[..., torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T] -> [B, C', T * stride]
        if x.is_cuda and self.cuda_op is not None:
            return self.cuda_op(x, self.conv.weight, self.conv.bias, self.conv.stride[0])
        y = self.conv(x)  # [B, C', (T - 1) * stride + kernel]
        if self.right_trim > 0:
            y = y[..., : y.shape[-1] - self.right_trim]
        return y


class SnakeBeta(nn.Module):
    """x + sin^2(x * e^alpha) / (e^beta + eps), per channel (alpha, beta stored in log space).

    `cuda_op`, when set, serves CUDA tensors in one pass instead of the formula's five: a callable
    (x, log_alpha, log_beta, eps, left_pad) -> [B, C, left_pad + T], left_pad zeros first (a
    causal convolution's padding, see `snake_into_conv`), the op qtts.kernels.snake_beta.snake_beta,
    installed per decoder by the layer that chooses kernels (core/engine/vocoder/decoder_kernels.py;
    the model imports none). Unset, and on every other device, the formula below runs, whose twin
    the kernel's tests hold it to.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.cuda_op: Callable[..., torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]
        if x.is_cuda and self.cuda_op is not None:
            return self.cuda_op(x, self.alpha, self.beta, SNAKE_EPS, 0)
        alpha = self.alpha.exp()[None, :, None]  # [1, C, 1]
        inv_beta = 1.0 / (self.beta.exp()[None, :, None] + SNAKE_EPS)  # [1, C, 1]
        return x + inv_beta * torch.sin(x * alpha).pow(2)


def snake_into_conv(act: SnakeBeta, conv: CausalConv1d, x: torch.Tensor) -> torch.Tensor:
    """conv(act(x)). On CUDA with the SnakeBeta op installed, the op writes the conv's left
    padding itself, so the conv reads its output as it is: one pass over the activation fewer
    (F.pad copies the whole activation into a padded one). Elsewhere the layers as they are.
    Pass x as a temporary when nothing else needs it: it is dropped before the conv runs, so the
    peak holds what the memory plan counts (core/engine/plan/footprint.py vocoder_bytes). (On
    CPython 3.11 and later a call owns its arguments, so `del x` frees a temporary; on 3.10 the
    caller's stack keeps it until the call returns: one activation more at the peak.)"""
    if x.is_cuda and act.cuda_op is not None:
        h = act.cuda_op(x, act.alpha, act.beta, SNAKE_EPS, conv.left_pad)  # [B, C, pad + T]
        del x
        return conv.forward_padded(h)
    h = act(x)
    del x
    return conv(h)


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv (k=7), LayerNorm, Linear x4, GELU, Linear, x gamma; plus input."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()  # exact (erf) GELU, as the official block
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]
        h = self.dwconv(x).transpose(1, 2)  # [B, T, C]
        h = self.pwconv2(self.act(self.pwconv1(self.norm(h))))  # [B, T, C]
        return x + (self.gamma * h).transpose(1, 2)  # [B, C, T]


class ResidualUnit(nn.Module):
    """SnakeBeta -> causal conv k=7 (dilated) -> SnakeBeta -> conv k=1, + input."""

    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]
        # conv1's output passed as a temporary: it dies once SnakeBeta has read it
        return snake_into_conv(self.act2, self.conv2, snake_into_conv(self.act1, self.conv1, x)) + x


class DecoderBlock(nn.Module):
    """SnakeBeta -> causal transposed conv (x rate, channels halved) -> residual units (1, 3, 9)."""

    def __init__(self, in_dim: int, out_dim: int, rate: int):
        super().__init__()
        units = [ResidualUnit(out_dim, d) for d in (1, 3, 9)]
        self.block = nn.ModuleList(
            [SnakeBeta(in_dim), CausalConvTranspose1d(in_dim, out_dim, 2 * rate, rate), *units]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T] -> [B, C / 2, T * rate]
        for layer in self.block:
            x = layer(x)
        return x


class Codebook(nn.Module):
    """One VQ codebook stored as running sums and usage counts (entry = sum / max(usage, eps))."""

    def __init__(self, size: int, dim: int):
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:  # [B, T] -> [B, T, D]
        table = self.embedding_sum / self.cluster_usage.clamp(min=CODEBOOK_USAGE_EPS)[:, None]
        return F.embedding(codes, table)


class _CodebookSlot(nn.Module):
    """Holds one codebook under the checkpoint's `layers.N._codebook` name."""

    def __init__(self, size: int, dim: int):
        super().__init__()
        self._codebook = Codebook(size, dim)


class _CodebookList(nn.Module):
    def __init__(self, count: int, size: int, dim: int):
        super().__init__()
        self.layers = nn.ModuleList([_CodebookSlot(size, dim) for _ in range(count)])


class ResidualCodebooks(nn.Module):
    """A group of residual codebooks: summed lookups, then a 1x1 conv up to the output width.

    `input_proj` is the encoder-side projection; decoding never uses it, but the checkpoint holds
    it, so it is kept for a strict state_dict load.
    """

    def __init__(self, count: int, size: int, dim: int, io_dim: int):
        super().__init__()
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.vq = _CodebookList(count, size, dim)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:  # [B, K, T] -> [B, io_dim, T]
        summed = None
        for k, slot in enumerate(self.vq.layers):  # sequential sum, in the official order
            q = slot._codebook.lookup(codes[:, k])  # [B, T, D]
            summed = q if summed is None else summed + q
        return self.output_proj(summed.transpose(1, 2))  # [B, io_dim, T]


class SplitResidualCodebooks(nn.Module):
    """Codebook 0 (semantic) and codebooks 1..Q-1 (acoustic) decoded apart and added."""

    def __init__(self, num_quantizers: int, size: int, io_dim: int):
        super().__init__()
        dim = io_dim // 2
        self.rvq_first = ResidualCodebooks(1, size, dim, io_dim)
        self.rvq_rest = ResidualCodebooks(num_quantizers - 1, size, dim, io_dim)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:  # [B, Q, T] -> [B, io_dim, T]
        return self.rvq_first.decode(codes[:, :1]) + self.rvq_rest.decode(codes[:, 1:])
