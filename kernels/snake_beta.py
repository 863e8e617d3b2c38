"""The speech decoder's SnakeBeta activation in one kernel, as the torch op `qtts::snake_beta`:
x + sin(x * e^log_alpha)^2 / (e^log_beta + eps), per channel of x [B, C, T].

Eager PyTorch makes that five passes over the activation (x * alpha, sin, pow, * 1/beta, + x),
each broadcasting a [1, C, 1] factor through the generic elementwise kernel; they were the largest
share of the vocoder's GPU time. Here each program reads one block of one channel row once, works
out that channel's alpha and 1/beta once, and writes the result once.

Rounding departs from the project's rule of rounding where the twin rounds: the kernel computes
in fp32 and rounds once to x's dtype. The twin in bf16 rounds alpha, 1/beta and every product, and
rounding x * alpha to bf16 moves sin's argument by up to half an ulp of |x * alpha|, which sin^2
passes on scaled by 1/beta; mirroring that would copy an error, not a choice. In fp32 the two
agree to a few ulps. eps is an argument because kernels do not import the model
(qtts.core.model.codec_modules.SNAKE_EPS is the value the decoder passes).

`left_pad` zeros before each row make the output a causal convolution's padded input, so the
decoder's convolutions after a SnakeBeta read it as it is instead of copying the whole activation
into a padded one first (SnakeBeta(0) = 0, so padding before or after it is the same).

The op runs the Triton kernel on CUDA and the twin elsewhere; its fake implementation gives meta
calls their shape. tests/unit/kernels/test_snake_beta_kernel.py ties kernel and twin under
TRITON_INTERPRET=1, and the twin to the decoder's own SnakeBeta.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from qtts.kernels.backend import TRITON_AVAILABLE, tl, triton
from qtts.kernels.rounding import rounded

BLOCK = 1024  # samples of one channel row per program


def snake_beta_twin(
    x: torch.Tensor,
    log_alpha: torch.Tensor,
    log_beta: torch.Tensor,
    eps: float,
    left_pad: int = 0,
) -> torch.Tensor:
    """x [B, C, T], log_alpha and log_beta [C] -> [B, C, left_pad + T]; exactly SnakeBeta.forward,
    then the causal convolution's zero padding."""
    alpha = log_alpha.exp()[None, :, None]  # [1, C, 1]
    inv_beta = 1.0 / (log_beta.exp()[None, :, None] + eps)  # [1, C, 1]
    y = x + inv_beta * torch.sin(x * alpha).pow(2)
    return F.pad(y, (left_pad, 0)) if left_pad else y


if TRITON_AVAILABLE:

    @triton.jit
    def _snake_beta_kernel(
        x_ptr,  # [B, C, T], unit stride along T
        x_stride_b,
        x_stride_c,
        alpha_ptr,  # [C] log scale
        beta_ptr,  # [C] log scale
        out_ptr,  # [B, C, pad + T] contiguous
        channels,  # C
        length,  # T
        pad,  # zeros before each output row, written by the launcher
        eps,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)  # b * C + c; int64: B * C * T may pass 2^31
        b, c = row // channels, row % channels
        t = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = t < length
        dt = out_ptr.dtype.element_ty
        alpha = tl.exp(tl.load(alpha_ptr + c).to(tl.float32))
        inv_beta = 1.0 / (tl.exp(tl.load(beta_ptr + c).to(tl.float32)) + eps)
        x = tl.load(x_ptr + b * x_stride_b + c * x_stride_c + t, mask=inside, other=0.0)
        x = x.to(tl.float32)
        s = tl.sin(x * alpha)
        y = x + inv_beta * (s * s)  # the twin's order: 1/beta times sin^2, then + x
        tl.store(out_ptr + row * (pad + length) + pad + t, rounded(y, dt).to(dt), mask=inside)


def snake_beta_triton(
    x: torch.Tensor,
    log_alpha: torch.Tensor,
    log_beta: torch.Tensor,
    eps: float,
    left_pad: int = 0,
) -> torch.Tensor:
    """The kernel's launcher: x [B, C, T] (any strides; copied if T's is not 1) -> new
    [B, C, left_pad + T], zeros first."""
    if not TRITON_AVAILABLE:
        raise RuntimeError("snake_beta_triton needs triton; the op qtts::snake_beta runs the twin")
    if x.dim() != 3 or log_alpha.shape != (x.shape[1],) or log_beta.shape != (x.shape[1],):
        raise ValueError("snake_beta: x needs shape [B, C, T] and log_alpha, log_beta shape [C]")
    if log_alpha.dtype != x.dtype or log_beta.dtype != x.dtype:
        raise ValueError("snake_beta: log_alpha and log_beta need x's dtype")
    if x.stride(-1) != 1:
        x = x.contiguous()  # the decoder's activations, trimmed or not, have unit stride along T
    if left_pad < 0:
        raise ValueError(f"snake_beta: left_pad must be >= 0, got {left_pad}")
    batch, channels, length = x.shape
    out = torch.empty(batch, channels, left_pad + length, dtype=x.dtype, device=x.device)
    if left_pad:
        out[..., :left_pad].zero_()  # the causal padding: [B, C, pad]
    if x.numel():
        grid = (batch * channels, triton.cdiv(length, BLOCK))  # rows on axis 0: up to 2^31 - 1
        _snake_beta_kernel[grid](
            x, x.stride(0), x.stride(1), log_alpha.contiguous(), log_beta.contiguous(), out,
            channels, length, left_pad, eps, BLOCK=BLOCK,
        )  # fmt: skip
    return out


@torch.library.custom_op("qtts::snake_beta", mutates_args=())
def snake_beta(
    x: torch.Tensor, log_alpha: torch.Tensor, log_beta: torch.Tensor, eps: float, left_pad: int = 0
) -> torch.Tensor:
    """SnakeBeta as one op, left_pad zeros before each row: the Triton kernel on CUDA, the twin
    elsewhere. The result is contiguous on every device, as the kernel's and the fake's."""
    return snake_beta_twin(x, log_alpha, log_beta, eps, left_pad).contiguous()


@snake_beta.register_kernel("cuda")
def _(x, log_alpha, log_beta, eps, left_pad=0):
    if TRITON_AVAILABLE:
        return snake_beta_triton(x, log_alpha, log_beta, eps, left_pad)
    return snake_beta_twin(x, log_alpha, log_beta, eps, left_pad).contiguous()


@snake_beta.register_fake
def _(x, log_alpha, log_beta, eps, left_pad=0):
    batch, channels, length = x.shape
    return torch.empty(batch, channels, left_pad + length, dtype=x.dtype, device=x.device)
