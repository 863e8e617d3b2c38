"""The speech decoder's frame-rate convolutions as one matrix product each (cuBLAS), instead of
cuDNN's convolution kernels.

On an H200 one convolution call of the decoder's window took 28.8 ms of 198 (15%) in cuDNN's
`implicit_convolve_sgemm`, a kernel without tensor cores, where its FLOPs fit in well under a
millisecond on them; the convolutions at the frame rate (the first ones, 512 to 1,536 channels
over 1-4 samples per frame) are where a wide, short convolution meets cuDNN's heuristics. As
products their cost is plain: an im2col copy of the input, one GEMM, no layout copies.

- `causal_conv`: a stride-1 causal Conv1d on its already left-padded input: every output sample
  reads K taps dilation apart, so the K shifted windows side by side (im2col, [B*T, K*C]) times
  the weight laid out as [K*C, C'] is the convolution, summed in fp32 by one GEMM as cuDNN sums.
- `causal_conv_transpose`: a ConvTranspose1d with kernel K = stride s or 2s, its right overhang
  cut (CausalConvTranspose1d): each input sample times the weight [C, C'*K] gives K output
  samples at t*s .. t*s + K - 1; with K = 2s the second half of sample t overlaps the first half
  of t + 1. The GEMM sums each half in fp32 and rounds it to the input's dtype; the two halves
  are added in fp32 and rounded once more (cuDNN rounds once: in bf16 this path rounds twice,
  which the decoder's bf16-vs-fp32 audio check in qtts doctor covers).
The modules' own convolutions are the twins (core/model/codec_modules.py);
tests/unit/engine/test_conv_gemm.py ties them on CPU, and tests/gpu/test_decoder_fast_path_gpu.py
on the GPU (each layer in fp32, the whole decoder in bf16). Pure torch: knows shapes, not the
model.
"""

from __future__ import annotations

import torch


def causal_conv(xp: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dilation: int):
    """xp [B, C, pad + T] (pad = (K - 1) * dilation zeros on the left), weight [C', C, K] ->
    [B, C', T], as a view of a [B, T, C'] result: the transformer after pre_conv takes exactly
    that layout; the SnakeBeta op after the first decoder conv copies it to its own (a pass over
    a frame-rate activation, small beside the later blocks')."""
    batch, channels, padded = xp.shape
    out_ch, in_ch, taps = weight.shape
    if in_ch != channels:
        raise ValueError(f"causal_conv: weight takes {in_ch} channels, the input has {channels}")
    length = padded - (taps - 1) * dilation
    rows = xp.transpose(1, 2).contiguous()  # [B, pad + T, C]
    # The K taps of each output sample side by side: row b, t, tap k is rows[b, t + k * dilation]
    cols = rows.as_strided((batch, length, taps, channels),
                           (padded * channels, channels, dilation * channels, 1))  # fmt: skip
    # [B*T, K*C], the im2col copy (explicit: at one row and dilation 1, reshape alone would give
    # an overlapping view whose row stride is shorter than a row, which BLAS does not take)
    cols = cols.reshape(batch * length, taps * channels).contiguous()
    w = weight.permute(0, 2, 1).reshape(out_ch, taps * channels)  # [C', K*C], tap-major
    y = cols @ w.t() if bias is None else torch.addmm(bias, cols, w.t())  # [B*T, C']
    return y.view(batch, length, out_ch).transpose(1, 2)  # [B, C', T]


def causal_conv_transpose(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: int
) -> torch.Tensor:
    """x [B, C, T], weight [C, C', K] with K = stride or 2 * stride -> [B, C', T * stride]: the
    transposed convolution with its right overhang cut."""
    batch, channels, length = x.shape
    in_ch, out_ch, taps = weight.shape
    if in_ch != channels or taps not in (stride, 2 * stride):
        raise ValueError(
            f"causal_conv_transpose: weight {tuple(weight.shape)} needs {channels} input "
            f"channels and a kernel of stride ({stride}) or twice it"
        )
    rows = x.transpose(1, 2).reshape(batch * length, channels)  # [B*T, C]
    y = (rows @ weight.reshape(channels, out_ch * taps)).view(batch, length, out_ch, taps)
    out = y[..., :stride].float()  # [B, T, C', s]: sample t*s + j from input sample t
    if taps == 2 * stride:  # ... and from t - 1's second half
        out[:, 1:] += y[:, :-1, :, stride:]
    if bias is not None:
        out += bias.float()[:, None]
    return out.permute(0, 2, 1, 3).reshape(batch, out_ch, length * stride).to(x.dtype)
