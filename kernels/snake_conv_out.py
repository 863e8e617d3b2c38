"""The speech decoder's last steps in one kernel, as the torch op `qtts::snake_conv_out`:
clamp(conv(SnakeBeta(x)), -1, 1) with the causal conv's 7 taps taking every channel to one,
x [B, C, T] -> audio [B, T].

Eagerly this is a SnakeBeta pass over the decoder's widest activation (96 channels at 24 kHz),
the padded copy the causal conv reads, a convolution with one output channel (cuDNN runs it
without tensor cores: one kernel took 16% of the decoder's GPU time on an H200) and a clamp.
Here each program owns BLOCK_T samples of one row: for each tap it reads the channels at the
tap's offset (all but the first from the cache), applies SnakeBeta, weighs them by the tap's
filter and sums over channels, so the audio is written once and the activation read once.

Zero padding before t = 0 is applied before SnakeBeta here and after it in the module; SnakeBeta
(0) is exactly 0, so the two agree. The kernel computes in fp32 and rounds once at the store;
the twin rounds after each op. tests/unit/kernels/test_snake_conv_out_kernel.py ties kernel and
twin under TRITON_INTERPRET=1, and the twin to the decoder's own last layers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from qtts.kernels.backend import TRITON_AVAILABLE, tl, triton
from qtts.kernels.rounding import rounded

# Channels summed per chunk and samples per program: the seven taps' loads of a chunk are live
# together, so the chunk bounds the registers (167 a thread at 16 x 256 and 4 warps on sm_90,
# no spills; 32 x 256 spilled).
BLOCK_C = 16
BLOCK_T = 256


def snake_conv_out_twin(
    x: torch.Tensor,  # [B, C, T]
    log_alpha: torch.Tensor,  # [C]
    log_beta: torch.Tensor,  # [C]
    weight: torch.Tensor,  # [1, C, K]
    bias: torch.Tensor,  # [1]
    eps: float,
) -> torch.Tensor:
    """Exactly the decoder's SnakeBeta, CausalConv1d(C, 1, K) and clamp, op for op -> [B, T]."""
    alpha = log_alpha.exp()[None, :, None]  # [1, C, 1]
    inv_beta = 1.0 / (log_beta.exp()[None, :, None] + eps)  # [1, C, 1]
    h = x + inv_beta * torch.sin(x * alpha).pow(2)
    h = F.conv1d(F.pad(h, (weight.shape[-1] - 1, 0)), weight, bias)  # [B, 1, T]
    return h.clamp(min=-1.0, max=1.0).squeeze(1)


if TRITON_AVAILABLE:

    @triton.jit
    def _snake_conv_out_kernel(
        x_ptr,  # [B, C, T], unit stride along T
        x_stride_b,
        x_stride_c,
        log_alpha_ptr,  # [C]
        log_beta_ptr,  # [C]
        w_ptr,  # [C, K] the filter (its one output channel), contiguous
        bias_ptr,  # [1]
        out_ptr,  # [B, T] contiguous
        channels,  # C
        length,  # T
        eps,
        TAPS: tl.constexpr,
        BLOCK_C: tl.constexpr,
        BLOCK_T: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T]
        x_row = x_ptr + b * x_stride_b
        acc = tl.zeros((BLOCK_T,), dtype=tl.float32)
        for c0 in range(0, channels, BLOCK_C):
            c = c0 + tl.arange(0, BLOCK_C)
            c_ok = c < channels
            alpha = tl.exp(tl.load(log_alpha_ptr + c, mask=c_ok, other=0.0).to(tl.float32))
            inv_beta = 1.0 / (
                tl.exp(tl.load(log_beta_ptr + c, mask=c_ok, other=0.0).to(tl.float32)) + eps
            )
            for tap in tl.static_range(TAPS):
                src = t - (TAPS - 1 - tap)  # the input sample this tap reads
                src_ok = (src >= 0) & (src < length)
                x = tl.load(x_row + c[:, None] * x_stride_c + src[None, :],
                            mask=c_ok[:, None] & src_ok[None, :], other=0.0)  # fmt: skip
                x = x.to(tl.float32)
                s = tl.sin(x * alpha[:, None])
                h = x + inv_beta[:, None] * (s * s)  # [BLOCK_C, BLOCK_T]
                w = tl.load(w_ptr + c * TAPS + tap, mask=c_ok, other=0.0).to(tl.float32)
                acc += tl.sum(h * w[:, None], axis=0)
        y = acc + tl.load(bias_ptr).to(tl.float32)
        y = tl.minimum(tl.maximum(y, -1.0), 1.0)
        dt = out_ptr.dtype.element_ty
        tl.store(out_ptr + b * length + t, rounded(y, dt).to(dt), mask=t < length)


def snake_conv_out_triton(x, log_alpha, log_beta, weight, bias, eps, *, block=None, warps=None):
    """The kernel's launcher: x [B, C, T] (any strides; copied if T's is not 1) -> new [B, T].
    block, warps: a probe's overrides of the samples per program and warps per program."""
    if not TRITON_AVAILABLE:
        raise RuntimeError("snake_conv_out_triton needs triton; the op runs the twin")
    batch, channels, length = x.shape
    if weight.dim() != 3 or weight.shape[:2] != (1, channels) or bias.shape != (1,):
        raise ValueError(f"snake_conv_out: weight must be [1, {channels}, K] and bias [1]")
    if x.stride(-1) != 1:
        x = x.contiguous()
    out = torch.empty(batch, length, dtype=x.dtype, device=x.device)  # [B, T]
    if not x.numel():
        return out
    block = block or BLOCK_T
    grid = (batch, triton.cdiv(length, block))
    _snake_conv_out_kernel[grid](
        x, x.stride(0), x.stride(1), log_alpha, log_beta, weight.reshape(channels, -1).contiguous(),
        bias, out, channels, length, eps, TAPS=weight.shape[-1], BLOCK_C=BLOCK_C, BLOCK_T=block,
        num_warps=warps or 4,
    )  # fmt: skip
    return out


@torch.library.custom_op("qtts::snake_conv_out", mutates_args=())
def snake_conv_out(
    x: torch.Tensor,
    log_alpha: torch.Tensor,
    log_beta: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """The decoder's tail as one op: the Triton kernel on CUDA, the twin elsewhere. The result is
    contiguous on every device."""
    return snake_conv_out_twin(x, log_alpha, log_beta, weight, bias, eps).contiguous()


@snake_conv_out.register_kernel("cuda")
def _(x, log_alpha, log_beta, weight, bias, eps):
    if TRITON_AVAILABLE:
        return snake_conv_out_triton(x, log_alpha, log_beta, weight, bias, eps)
    return snake_conv_out_twin(x, log_alpha, log_beta, weight, bias, eps).contiguous()


@snake_conv_out.register_fake
def _(x, log_alpha, log_beta, weight, bias, eps):
    return torch.empty(x.shape[0], x.shape[2], dtype=x.dtype, device=x.device)
