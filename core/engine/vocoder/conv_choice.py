"""Each ungrouped convolution of the speech decoder in the way that runs fastest on this card,
timed there once: cuDNN's convolution as the model lays it out, or one matrix product
(core/engine/vocoder/conv_gemm.py). Which is faster depends on the card, the dtype, the
convolution's shape and its input's size (on an H200 one frame-rate convolution ran in a cuDNN
kernel without tensor cores, where its product took a fraction of the time), so it is measured,
as Triton's autotuner and cudnn.benchmark measure, and the choice is kept in a file (in
QTTS_CACHE_DIR or the user's cache folder: core/engine/device/knobs.py), keyed by the card,
torch and cuDNN, so the next process on that machine times nothing.

A convolution's first call at an input size class (rows x samples, by powers of 4) runs both ways
a few times, reads CUDA events, keeps the faster and returns its result; the calls after it go
straight to the choice. The timing waits on its own events only, never on the device, so it does
not drain the decode loop's stream. Each way is timed alone: a copy it makes the next op do (a
product's output is laid out [B, T, C']) is not counted. Inside a CUDA graph capture nothing is
timed (the vocoder's first call of a window shape runs eagerly before its capture, so its sizes
are chosen by then); an unseen size there takes `fallback`. Off by default until a GPU run shows
the choice pays (QTTS_DECODER_CONVS=timed); the twins are the module's own convolutions, and a
CPU never installs this. Knows convolutions, timings and one JSON file; no model, no graphs.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from qtts.core.engine.vocoder.conv_gemm import causal_conv, causal_conv_transpose

log = logging.getLogger("qtts")
TIMED_CALLS = 3  # per way, after one untimed call (its setup: cuDNN's plan, cuBLAS' heuristics)
WAYS = ("cudnn", "product")
Op = Callable[..., torch.Tensor]


class Choices:
    """The timed choices, key -> way, read once from the file and written back after each new
    one (atomically; a file another process wrote meanwhile is merged, not lost). A file that
    cannot be read or written leaves the choices in memory only, with one warning."""

    def __init__(self, path: Path):
        self.path, self._lock = path, threading.Lock()
        self._known: dict[str, str] = {}
        self._warned = False
        try:
            self._known = {
                k: v for k, v in json.loads(path.read_text("utf-8")).items() if v in WAYS
            }
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            self._warn(e)

    def get(self, key: str) -> str | None:
        return self._known.get(key)

    def put(self, key: str, way: str) -> None:
        with self._lock:
            self._known[key] = way
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    on_disk = json.loads(self.path.read_text("utf-8"))
                except (OSError, ValueError):
                    on_disk = {}
                merged = {**on_disk, **self._known}
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(merged, indent=0, sort_keys=True), "utf-8")
                os.replace(tmp, self.path)
            except OSError as e:
                self._warn(e)

    def _warn(self, error: Exception) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "decoder convolution choices kept in memory only (%s): %s", self.path, error
            )


@functools.lru_cache(maxsize=8)
def card_key(device: torch.device) -> str:
    """What a choice holds for: the card, torch and cuDNN (a new version may time otherwise)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return f"{name}|torch {torch.__version__}|cudnn {cudnn}"


def size_class(rows: int, samples: int) -> int:
    """Inputs of about the same work share a choice: rows x samples by powers of 4."""
    return max(0, round(math.log(max(1, rows * samples), 4)))


class TimedConv:
    """A decoder convolution's `cuda_op` that serves each call the way timed fastest for its
    size: `ways` maps a way's name to an op taking the module's arguments."""

    def __init__(self, ways: dict[str, Op], signature: str, choices: Choices, fallback: str):
        self.ways, self.signature, self.choices, self.fallback = ways, signature, choices, fallback

    def __call__(self, x: torch.Tensor, weight, bias, arg) -> torch.Tensor:
        key = (
            f"{card_key(x.device)}|{x.dtype}|{self.signature}|{size_class(x.shape[0], x.shape[-1])}"
        )
        way = self.choices.get(key)
        if way is None:
            if _capturing(x):
                return self.ways[self.fallback](x, weight, bias, arg)
            way, out = self._timed(x, weight, bias, arg)
            self.choices.put(key, way)
            return out
        return self.ways[way](x, weight, bias, arg)

    def _timed(self, x, weight, bias, arg) -> tuple[str, torch.Tensor]:
        """(the fastest way, its result), each way run once untimed, then TIMED_CALLS times
        between CUDA events (on a CPU: wall time, for the tests)."""
        seconds: dict[str, float] = {}
        results: dict[str, torch.Tensor] = {}
        for way, op in self.ways.items():
            results[way] = op(x, weight, bias, arg)  # its setup, outside the timing
            seconds[way] = _time(lambda op=op: op(x, weight, bias, arg), x.device)
        best = min(seconds, key=seconds.get)
        log.debug("decoder conv %s: %s", self.signature, seconds)
        return best, results[best]


def _capturing(x: torch.Tensor) -> bool:
    """Whether x's stream is being captured into a CUDA graph (never on a CPU)."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def _time(run: Callable[[], torch.Tensor], device: torch.device) -> float:
    if device.type != "cuda":
        import time

        start = time.perf_counter()
        for _ in range(TIMED_CALLS):
            run()
        return time.perf_counter() - start
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(TIMED_CALLS):
        run()
    end.record()
    end.synchronize()  # this stream's work only: the decode loop's stream runs on
    return begin.elapsed_time(end) / 1e3


def timed_conv(module, choices: Choices, fallback: str) -> TimedConv | None:
    """The timed op for a CausalConv1d or CausalConvTranspose1d (core/model/codec_modules.py)
    that a product can compute (ungrouped; a transposed one with a kernel of its stride or
    twice it), else None: cuDNN is then its only way."""
    conv = module.conv
    if conv.groups != 1:
        return None
    kernel = conv.kernel_size[0]
    if isinstance(conv, torch.nn.ConvTranspose1d):
        stride = conv.stride[0]
        if kernel not in (stride, 2 * stride):
            return None
        ways = {"cudnn": _cudnn_transpose(kernel - stride), "product": causal_conv_transpose}
        signature = f"convT {conv.in_channels}>{conv.out_channels} k{kernel} s{stride}"
    else:
        ways = {"cudnn": _cudnn_conv, "product": causal_conv}
        signature = f"conv {conv.in_channels}>{conv.out_channels} k{kernel} d{conv.dilation[0]}"
    return TimedConv(ways, signature, choices, fallback)


def _cudnn_conv(xp, weight, bias, dilation):
    return F.conv1d(xp, weight, bias, dilation=dilation)


def _cudnn_transpose(trim: int) -> Op:
    def run(x, weight, bias, stride):
        y = F.conv_transpose1d(x, weight, bias, stride=stride)
        return y[..., : y.shape[-1] - trim] if trim else y

    return run
