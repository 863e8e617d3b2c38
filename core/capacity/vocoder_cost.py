"""The vocoder's share of the roofline: FLOPs and bytes per second of audio, counted, not guessed.

The speech decoder (core/model/codec.py) turns 16 codes per frame into 1,920 samples through a
small transformer and a stack of (transposed) convolutions, in windows of 300 frames, each after
the first with 25 frames of left context whose audio is dropped. Its work per audio-second is of
the order of the language model's, so a ceiling that counts only the decode step is too high.

One window is run on the meta device at the configuration's real dimensions: FlopCounterMode
counts its FLOPs (matmuls, convolutions, attention), and a dispatch mode counts the bytes each op
reads and writes (an unfused count: every activation goes through memory once per op that
touches it), plus the weights read once per vocoder call, shared by the rows decoded together.
No memory is allocated and nothing is timed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from qtts.core.engine.plan.roofline import FRAME_S, DeviceSpec
from qtts.core.engine.vocoder.vocoder_windows import CHUNK_FRAMES, LEFT_CONTEXT
from qtts.core.model.codec import SpeechDecoder, SpeechDecoderConfig


@dataclass(frozen=True)
class VocoderCost:
    flops_per_audio_s: float
    activation_bytes_per_audio_s: float
    weight_bytes: float  # read once per call, whatever the rows in it

    def bytes_per_audio_s(self, rows_per_call: int) -> float:
        return self.activation_bytes_per_audio_s + self.weight_bytes / (
            rows_per_call * CHUNK_FRAMES * FRAME_S
        )

    def seconds_per_audio_s(self, device: DeviceSpec, rows_per_call: int) -> float:
        """The lower bound on the GPU time one second of audio costs the vocoder."""
        return max(
            self.flops_per_audio_s / device.flops,
            self.bytes_per_audio_s(rows_per_call) / device.bandwidth,
        )


class _ByteCounter(TorchDispatchMode):
    """Bytes of every tensor each op reads or writes (views counted too: an upper bound)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves((args, kwargs, out)):
            if isinstance(t, torch.Tensor):
                self.bytes += t.numel() * t.element_size()
        return out


@lru_cache(maxsize=8)
def vocoder_cost(cfg: SpeechDecoderConfig, dtype: torch.dtype) -> VocoderCost:
    """Per audio-second cost of a full window (left context + 300 frames) of one row."""
    with torch.device("meta"):
        decoder = SpeechDecoder(cfg).to(dtype)
        codes = torch.zeros(1, cfg.num_quantizers, LEFT_CONTEXT + CHUNK_FRAMES, dtype=torch.long)
    flops, traffic = FlopCounterMode(display=False), _ByteCounter()
    with torch.inference_mode(), flops, traffic:
        decoder(codes)
    audio_s = CHUNK_FRAMES * FRAME_S  # what the window keeps
    weights = sum(p.numel() * p.element_size() for p in decoder.parameters())
    return VocoderCost(flops.get_total_flops() / audio_s, traffic.bytes / audio_s, weights)
