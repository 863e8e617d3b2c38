"""One residual unit of the speech decoder in one kernel, as the torch op `qtts::residual_unit`:
x + conv2(snake2(conv1(snake1(x)))), conv1 causal with 7 dilated taps, conv2 1x1, per [B, C, T].

Eager PyTorch runs a unit as six or more passes over its activation (SnakeBeta, the padded
input, conv1, SnakeBeta, conv2, the residual add), and cuDNN runs the narrow convolutions of the
decoder's last blocks (96 and 192 channels, at 8 and 24 kHz) far from the tensor cores' rate,
with layout copies around them. Those blocks hold most of the decoder's activation bytes. Here
each program owns one row's block of BLOCK_T samples and every channel: it reads x once per tap
(the taps overlap, so all but the first read hit the cache), applies the first SnakeBeta as it
loads, runs conv1 as seven tensor-core products over channel chunks, keeps the result in
registers through the bias and the second SnakeBeta, runs conv2 as one more product, adds x and
writes the unit's output once.

Causal zero padding: conv1 pads SnakeBeta's output with zeros on the left. SnakeBeta(0) is exactly
0, so loading zeros before t = 0 and applying SnakeBeta to them gives the same padded input.
Channels are padded to a power of two inside the program (masked loads give zero weights, and
zero pre-activations give SnakeBeta 0), so any width runs; the decoder installs it where the
widths make the padding cheap (core/engine/decoder_kernels.py).

Rounding: products take their inputs in x's dtype and accumulate in fp32 (as cuDNN does), and the
kernel rounds once more only where a product needs its input in x's dtype (the second SnakeBeta's
output) and at the store; the twin rounds after each op. In fp32 the products run in IEEE fp32
(no TF32), so the two agree to float rounding there.

The op runs the Triton kernel on CUDA and the twin elsewhere; tests/unit/kernels/
test_residual_unit_kernel.py ties kernel and twin under TRITON_INTERPRET=1, and the twin to the
decoder's own ResidualUnit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from qtts.kernels.backend import TRITON_AVAILABLE, is_interpreted, tl, triton
from qtts.kernels.rounding import rounded

TAPS = 7  # conv1's kernel size in every residual unit of the decoder
BLOCK_K = 32  # input channels per tensor-core product (widths 96 and 192 divide by it)


def _snake(x, log_alpha, log_beta, eps):
    alpha = log_alpha.exp()[None, :, None]  # [1, C, 1]
    inv_beta = 1.0 / (log_beta.exp()[None, :, None] + eps)  # [1, C, 1]
    return x + inv_beta * torch.sin(x * alpha).pow(2)


def residual_unit_twin(
    x: torch.Tensor,  # [B, C, T]
    alpha1: torch.Tensor,  # [C] log scales of the first SnakeBeta
    beta1: torch.Tensor,
    w1: torch.Tensor,  # [C, C, 7] conv1 (out, in, tap)
    b1: torch.Tensor,  # [C]
    dilation: int,
    alpha2: torch.Tensor,
    beta2: torch.Tensor,
    w2: torch.Tensor,  # [C, C, 1] conv2
    b2: torch.Tensor,  # [C]
    eps: float,
) -> torch.Tensor:
    """Exactly ResidualUnit.forward (core/model/codec_modules.py), op for op."""
    h = _snake(x, alpha1, beta1, eps)
    h = F.conv1d(F.pad(h, ((w1.shape[-1] - 1) * dilation, 0)), w1, b1, dilation=dilation)
    h = F.conv1d(_snake(h, alpha2, beta2, eps), w2, b2)
    return h + x


if TRITON_AVAILABLE:

    @triton.jit
    def _snake_of(x, log_alpha_ptr, log_beta_ptr, c, c_ok, eps):
        """SnakeBeta in fp32 of x [C', T'] whose rows are channels c [C'] (masked ones: 0)."""
        alpha = tl.exp(tl.load(log_alpha_ptr + c, mask=c_ok, other=0.0).to(tl.float32))
        beta = tl.exp(tl.load(log_beta_ptr + c, mask=c_ok, other=0.0).to(tl.float32))
        inv_beta = 1.0 / (beta + eps)
        s = tl.sin(x * alpha[:, None])
        return x + inv_beta[:, None] * (s * s)

    @triton.jit
    def _residual_unit_kernel(
        x_ptr,  # [B, C, T], unit stride along T
        x_stride_b,
        x_stride_c,
        alpha1_ptr,  # [C]
        beta1_ptr,  # [C]
        w1_ptr,  # [7, C, C] conv1, tap-major (tap, out, in), contiguous
        b1_ptr,  # [C]
        alpha2_ptr,  # [C]
        beta2_ptr,  # [C]
        w2_ptr,  # [C, C] conv2 (out, in), contiguous
        b2_ptr,  # [C]
        out_ptr,  # [B, C, T] contiguous
        channels,  # C
        length,  # T
        dilation,
        eps,
        TAPS: tl.constexpr,
        C_PAD: tl.constexpr,  # C rounded up to a power of two
        BLOCK_K: tl.constexpr,
        BLOCK_T: tl.constexpr,
        # Products in IEEE fp32 (no TF32): for fp32 x, and under triton's interpreter, whose
        # bf16 products are wrong (its bf16 operands exact in fp32 give what tensor cores give).
        FP32_PRODUCTS: tl.constexpr,
        SNAKE_INPUT: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T] output samples
        co = tl.arange(0, C_PAD)  # output channels
        co_ok = co < channels
        dt = out_ptr.dtype.element_ty
        x_row = x_ptr + b * x_stride_b
        acc = tl.zeros((C_PAD, BLOCK_T), dtype=tl.float32)  # conv1 before its bias
        for tap in tl.static_range(TAPS):
            src = t - (TAPS - 1 - tap) * dilation  # the input sample this tap reads
            src_ok = (src >= 0) & (src < length)
            for k0 in range(0, channels, BLOCK_K):
                ci = k0 + tl.arange(0, BLOCK_K)
                ci_ok = ci < channels
                xs = tl.load(x_row + ci[:, None] * x_stride_c + src[None, :],
                             mask=ci_ok[:, None] & src_ok[None, :], other=0.0)  # fmt: skip
                h = xs.to(tl.float32)
                if SNAKE_INPUT:  # off only in tools/vocoder_probe.py: what the recompute costs
                    h = _snake_of(h, alpha1_ptr, beta1_ptr, ci, ci_ok, eps)
                w_tap = w1_ptr + tap * channels * channels
                w = tl.load(w_tap + co[:, None] * channels + ci[None, :],
                            mask=co_ok[:, None] & ci_ok[None, :], other=0.0)  # fmt: skip
                h = rounded(h, dt)  # the product's input in x's dtype, held in fp32
                if FP32_PRODUCTS:
                    acc = tl.dot(w.to(tl.float32), h, acc, input_precision="ieee")
                else:
                    acc = tl.dot(w, h.to(dt), acc)
        acc += tl.load(b1_ptr + co, mask=co_ok, other=0.0).to(tl.float32)[:, None]
        h2 = rounded(_snake_of(acc, alpha2_ptr, beta2_ptr, co, co_ok, eps), dt)  # [C_PAD, BLOCK_T]
        w2 = tl.load(w2_ptr + co[:, None] * channels + co[None, :],
                     mask=co_ok[:, None] & co_ok[None, :], other=0.0)  # fmt: skip
        if FP32_PRODUCTS:
            y = tl.dot(w2.to(tl.float32), h2, input_precision="ieee")
        else:
            y = tl.dot(w2, h2.to(dt))
        t_ok = t < length
        keep = co_ok[:, None] & t_ok[None, :]
        x = tl.load(x_row + co[:, None] * x_stride_c + t[None, :], mask=keep, other=0.0)
        y += tl.load(b2_ptr + co, mask=co_ok, other=0.0).to(tl.float32)[:, None]
        y += x.to(tl.float32)
        out = out_ptr + b * channels * length + co[:, None] * length + t[None, :]
        tl.store(out, rounded(y, dt).to(dt), mask=keep)


def launch_shape(channels: int) -> tuple[int, int]:
    """(samples, warps) per program for a unit this wide: the largest block whose accumulators
    and second product fit the register file without spilling on sm_80 and sm_90 (ptxas, as
    tests/unit/kernels/test_kernels_compile_for_gpus.py builds it): 96 channels (padded to 128)
    take 192 registers a thread at 128 samples and 8 warps, 192 (padded to 256) 103 at 64
    samples and 16 warps."""
    return (128, 8) if channels <= 128 else (64, 16)


def residual_unit_triton(
    x,
    alpha1,
    beta1,
    w1,
    b1,
    dilation,
    alpha2,
    beta2,
    w2,
    b2,
    eps,
    *,
    block=None,
    warps=None,
    snake_input=True,
) -> torch.Tensor:
    """The kernel's launcher: x [B, C, T] (any strides; copied if T's is not 1) -> new [B, C, T].
    block, warps: a probe's overrides of the samples per program and warps per program;
    snake_input=False skips the first SnakeBeta (a probe's measure of its cost: not the unit)."""
    if not TRITON_AVAILABLE:
        raise RuntimeError("residual_unit_triton needs triton; the op runs the twin")
    batch, channels, length = x.shape
    if w1.shape != (channels, channels, TAPS) or w2.shape[:2] != (channels, channels):
        raise ValueError(
            f"residual_unit: weights must be [C, C, {TAPS}] and [C, C, 1] for C = {channels}"
        )
    if x.stride(-1) != 1:
        x = x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # [B, C, T]
    if not x.numel():
        return out
    c_pad = max(16, triton.next_power_of_2(channels))
    default_block, default_warps = launch_shape(c_pad)
    block, warps = block or default_block, warps or default_warps
    taps_first = w1.permute(2, 0, 1).contiguous()  # [7, C, C]: each tap's matrix contiguous
    grid = (batch, triton.cdiv(length, block))
    _residual_unit_kernel[grid](
        x, x.stride(0), x.stride(1), alpha1, beta1, taps_first, b1, alpha2, beta2,
        w2.reshape(channels, channels).contiguous(), b2, out, channels, length, dilation, eps,
        TAPS=TAPS, C_PAD=c_pad, BLOCK_K=min(BLOCK_K, c_pad), BLOCK_T=block,
        FP32_PRODUCTS=x.dtype == torch.float32 or is_interpreted(_residual_unit_kernel),
        SNAKE_INPUT=snake_input, num_warps=warps,
    )  # fmt: skip
    return out


@torch.library.custom_op("qtts::residual_unit", mutates_args=())
def residual_unit(
    x: torch.Tensor,
    alpha1: torch.Tensor,
    beta1: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    dilation: int,
    alpha2: torch.Tensor,
    beta2: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """A residual unit as one op: the Triton kernel on CUDA, the twin elsewhere. The result is
    contiguous on every device."""
    args = (x, alpha1, beta1, w1, b1, dilation, alpha2, beta2, w2, b2, eps)
    return residual_unit_twin(*args).contiguous()


@residual_unit.register_kernel("cuda")
def _(x, alpha1, beta1, w1, b1, dilation, alpha2, beta2, w2, b2, eps):
    args = (x, alpha1, beta1, w1, b1, dilation, alpha2, beta2, w2, b2, eps)
    if TRITON_AVAILABLE:
        return residual_unit_triton(*args)
    return residual_unit_twin(*args).contiguous()


@residual_unit.register_fake
def _(x, alpha1, beta1, w1, b1, dilation, alpha2, beta2, w2, b2, eps):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
