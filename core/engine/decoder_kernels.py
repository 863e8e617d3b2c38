"""The speech decoder's kernels: qtts.kernels' ops installed into one decoder's modules.

The model layer is plain PyTorch and imports no kernels; a SnakeBeta module runs an op it is
given on CUDA tensors (core/model/codec_modules.py). Every path that decodes audio on a device
(the synthesizer, the bench, the doctor) installs them here, so what is measured is what a job
runs. On a CPU nothing changes: the modules keep their own formula there.
Knows which modules take which op; no shapes, no graphs.
"""

from __future__ import annotations

from qtts.core.model.codec import SpeechDecoder
from qtts.core.model.codec_modules import SnakeBeta
from qtts.kernels.snake_beta import snake_beta


def with_kernels(decoder: SpeechDecoder) -> SpeechDecoder:
    """decoder, its SnakeBeta activations served by the one-pass kernel on CUDA."""
    for module in decoder.modules():
        if isinstance(module, SnakeBeta):
            module.cuda_op = _snake_beta
    return decoder


def _snake_beta(x, log_alpha, log_beta, eps):
    # A plain function, not the op object itself: a decoder holding it can still be copied and
    # pickled (the op's dispatcher cannot), and the copy keeps its kernel.
    return snake_beta(x, log_alpha, log_beta, eps)
