"""The speech decoder's kernels: qtts.kernels' ops installed into one decoder's modules.

The model layer is plain PyTorch and imports no kernels; a module runs an op it is given on CUDA
tensors (core/model/codec_modules.py, core/model/codec.py). Every path that decodes audio on a
device (the synthesizer, the bench, the doctor) installs them here, so what is measured is what a
job runs. On a CPU nothing changes: the modules keep their own layers there.

Three ops:
- SnakeBeta in one pass, for every activation a fused op below does not take in;
- a whole residual unit in one kernel, for units at most FUSED_UNIT_CHANNELS wide: the last two
  decoder blocks (192 and 96 channels at 8 and 24 kHz), which hold most of the decoder's
  activation bytes and whose narrow convolutions cuDNN runs far from the tensor cores' rate;
  wider units keep cuDNN's convolutions, which run there at a good rate;
- the last SnakeBeta, the conv to one channel and the clamp in one kernel.
Knows which modules take which op; no shapes, no graphs.
"""

from __future__ import annotations

from qtts.core.model.codec import SpeechDecoder
from qtts.core.model.codec_modules import ResidualUnit, SnakeBeta
from qtts.kernels.residual_unit import residual_unit
from qtts.kernels.snake_beta import snake_beta
from qtts.kernels.snake_conv_out import snake_conv_out

# Residual units up to this width run as one kernel (channels padded to a power of two inside).
FUSED_UNIT_CHANNELS = 192


def with_kernels(
    decoder: SpeechDecoder,
    *,
    fused: bool = True,
    unit_channels: int = FUSED_UNIT_CHANNELS,
    tail: bool = True,
) -> SpeechDecoder:
    """decoder, served on CUDA by the one-pass SnakeBeta and, when `fused` (the engine settings'
    decoder_fusion), by the fused residual units up to `unit_channels` wide (0: none) and, with
    `tail`, the fused last layers. unit_channels and tail are for tools/vocoder_probe.py, which
    times each op's share."""
    if not fused:
        unit_channels, tail = 0, False
    for module in decoder.modules():
        if isinstance(module, SnakeBeta):
            module.cuda_op = _snake_beta
        elif isinstance(module, ResidualUnit):
            wide = module.conv1.conv.in_channels > unit_channels
            module.cuda_op = None if wide else _residual_unit
    decoder.cuda_tail = _snake_conv_out if tail else None
    return decoder


# Plain functions, not the op objects themselves: a decoder holding them can still be copied and
# pickled (an op's dispatcher cannot), and the copy keeps its kernels.
def _snake_beta(x, log_alpha, log_beta, eps):
    return snake_beta(x, log_alpha, log_beta, eps)


def _residual_unit(x, alpha1, beta1, w1, b1, dilation, alpha2, beta2, w2, b2, eps):
    return residual_unit(x, alpha1, beta1, w1, b1, dilation, alpha2, beta2, w2, b2, eps)


def _snake_conv_out(x, log_alpha, log_beta, weight, bias, eps):
    return snake_conv_out(x, log_alpha, log_beta, weight, bias, eps)
