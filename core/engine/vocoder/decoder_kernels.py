"""The speech decoder's fast path on CUDA: ops installed into one decoder's modules.

The model layer is plain PyTorch and imports no kernels; a module runs an op it is given on CUDA
tensors (core/model/codec_modules.py). Every path that decodes audio on a device (the
synthesizer, the bench, the doctor) installs them here, so what is measured is what a job runs.
On a CPU nothing changes: the modules keep their own layers there.

- SnakeBeta: one Triton pass (qtts.kernels.snake_beta) instead of the formula's five, writing the
  next causal convolution's left padding too, so no padded copy of the activation is made.
- The frame-rate convolutions (pre_conv, the upsampling transposed convolutions, the first
  decoder conv and the first block's transposed conv): one cuBLAS product each
  (core/engine/vocoder/conv_gemm.py) when `gemm` (the engine tuning' decoder_gemm), instead of
  cuDNN. On an H200 one convolution call of the decoder's window ran in cuDNN's kernel without
  tensor cores; which one is not known yet (tools/vocoder_probe.py now times each convolution
  alone), and these are the ones whose products stay small. Every later convolution (the first
  block's residual units at 768 channels, the second block's transposed conv, and all narrower ones
  at 2-24 kHz) stays with cuDNN, where an im2col copy would be several times the activation.
- Timed (QTTS_DECODER_CONVS=timed): every convolution a product can compute takes the way that
  ran fastest on this card at its size, timed once and kept in a file (conv_choice.py).
Knows which modules take which op; no shapes, no graphs.
"""

from __future__ import annotations

from pathlib import Path

from qtts.core.engine.vocoder.conv_choice import Choices, timed_conv
from qtts.core.engine.vocoder.conv_gemm import causal_conv, causal_conv_transpose
from qtts.core.model.codec import SpeechDecoder
from qtts.core.model.codec_modules import (
    CausalConv1d,
    CausalConvTranspose1d,
    DecoderBlock,
    SnakeBeta,
)
from qtts.kernels.snake_beta import snake_beta


def with_kernels(
    decoder: SpeechDecoder, *, gemm: bool = True, choices: str | Path | None = None
) -> SpeechDecoder:
    """decoder, served on CUDA by the one-pass SnakeBeta and, with `gemm`, by matrix products
    for its frame-rate convolutions (`frame_rate_convs`); without, those are cuDNN's again.
    With `choices` (a file: the engine tuning's decoder_conv_choices), every convolution a
    product can compute takes the way timed fastest on the card (conv_choice.py), the ways
    above being what a size met inside a graph capture, untimed, falls back to."""
    for module in decoder.modules():
        if isinstance(module, SnakeBeta):
            module.cuda_op = _snake_beta
    frame_rate = frame_rate_convs(decoder)
    for conv in frame_rate:
        conv.cuda_op = (_conv if isinstance(conv, CausalConv1d) else _conv_t) if gemm else None
    if choices is not None:
        kept = Choices(Path(choices))
        for conv in decoder.modules():
            if isinstance(conv, (CausalConv1d, CausalConvTranspose1d)):
                fallback = "product" if gemm and any(conv is f for f in frame_rate) else "cudnn"
                conv.cuda_op = timed_conv(conv, kept, fallback) or conv.cuda_op
    return decoder


def frame_rate_convs(decoder: SpeechDecoder) -> list[CausalConv1d | CausalConvTranspose1d]:
    """The convolutions before the first decoder block's residual units: pre_conv, each
    upsampling stage's transposed conv, the first decoder conv and the first block's transposed
    conv (at most 4 samples per frame in, 32 out)."""
    first_block = next(m for m in decoder.decoder if isinstance(m, DecoderBlock))
    return [
        decoder.pre_conv,
        *(stage[0] for stage in decoder.upsample),
        decoder.decoder[0],
        first_block.block[1],
    ]


# Plain functions, not the op objects themselves: a decoder holding them can still be copied and
# pickled (an op's dispatcher cannot), and the copy keeps its kernels.
def _snake_beta(x, log_alpha, log_beta, eps, left_pad=0):
    return snake_beta(x, log_alpha, log_beta, eps, left_pad)


def _conv(xp, weight, bias, dilation):
    return causal_conv(xp, weight, bias, dilation)


def _conv_t(x, weight, bias, stride):
    return causal_conv_transpose(x, weight, bias, stride)
