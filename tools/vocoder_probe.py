"""Where the speech decoder's time goes on a GPU: one full window (rows x 325 frames) of the
random-weight decoder at a real size, timed eagerly per audio-second: with SnakeBeta's formula,
with its one-pass kernel (what a job runs), with cuDNN's autotuner, with SnakeBeta compiled by
torch.compile; its last conv (96 channels to 1, audio rate) alone, as built and with its
filters padded to 8 output channels (cuDNN's tensor-core shapes; a lead to follow where the
padded one is faster); and a profiler table of its top CUDA kernels (the formula's).

    python tools/vocoder_probe.py --size 0.6b --rows 8 [--dtype bfloat16]

A diagnosis, not a bench: the job runs the decoder through CUDA graphs (qtts bench times that).
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F

from qtts.core.bench.throughput import random_models
from qtts.core.engine.decoder_kernels import with_kernels
from qtts.core.model import codec_modules

FRAMES = 325  # a full later window: one chunk plus its left context
SECONDS_PER_FRAME = 0.08


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(decoder, codes, repeats: int) -> float:
    """Mean seconds per forward, after two warm-up calls."""
    for _ in range(2):
        decoder(codes)
    sync()
    t = time.perf_counter()
    for _ in range(repeats):
        decoder(codes)
    sync()
    return (time.perf_counter() - t) / repeats


def last_conv_rows(decoder, rows: int, repeats: int):
    """(as built, padded to 8 output channels): seconds per call of the decoder's last conv on
    one window's audio-rate input; the padded one's first channel checked against it first."""
    conv = decoder.decoder[-1].conv
    up = math.prod((*decoder.cfg.upsampling_ratios, *decoder.cfg.upsample_rates))
    x = torch.randn(rows, conv.in_channels, FRAMES * up + conv.kernel_size[0] - 1,
                    device=conv.weight.device, dtype=conv.weight.dtype)  # fmt: skip
    weight = torch.zeros((8, *conv.weight.shape[1:]), device=x.device, dtype=x.dtype)
    weight[:1], bias = conv.weight, F.pad(conv.bias, (0, 7))
    plain = lambda: conv(x)  # noqa: E731
    padded = lambda: F.conv1d(x, weight, bias)[:, :1]  # noqa: E731
    torch.testing.assert_close(padded(), plain(), rtol=2e-2, atol=2e-2)  # bf16 sums may differ
    return timed(lambda _: plain(), None, repeats), timed(lambda _: padded(), None, repeats)


def snake(x, log_alpha, log_beta):  # SnakeBeta's own arithmetic, as one function to compile
    alpha = log_alpha.exp()[None, :, None]
    inv_beta = 1.0 / (log_beta.exp()[None, :, None] + codec_modules.SNAKE_EPS)
    return x + inv_beta * torch.sin(x * alpha).pow(2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="0.6b")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    _, _, decoder = random_models(args.size, args.device, dtype)
    q, size = decoder.cfg.num_quantizers, decoder.cfg.codebook_size
    codes = torch.randint(0, size, (args.rows, q, FRAMES), device=args.device)
    audio_s = args.rows * FRAMES * SECONDS_PER_FRAME

    def report(label: str, seconds: float) -> None:
        print(f"{label:28} {seconds * 1e3:8.1f} ms  {seconds / audio_s * 1e3:6.3f} ms per audio-s")

    with torch.no_grad():
        report("eager, formula", timed(decoder, codes, args.repeats))
        with_kernels(decoder)
        report("eager, SnakeBeta kernel", timed(decoder, codes, args.repeats))
        for module in decoder.modules():  # back to the formula for the rows below
            if isinstance(module, codec_modules.SnakeBeta):
                module.cuda_op = None
        torch.backends.cudnn.benchmark = True
        report("eager, cudnn.benchmark", timed(decoder, codes, args.repeats))
        torch.backends.cudnn.benchmark = False
        torch._dynamo.config.cache_size_limit = 64  # one kernel per width, if shapes specialize
        plain, fused = codec_modules.SnakeBeta.forward, torch.compile(snake, dynamic=True)
        codec_modules.SnakeBeta.forward = lambda m, x: fused(x, m.alpha.detach(), m.beta.detach())
        report("SnakeBeta compiled", timed(decoder, codes, args.repeats))
        codec_modules.SnakeBeta.forward = plain
        as_built, padded = last_conv_rows(decoder, args.rows, args.repeats)
        report("last conv alone", as_built)
        report("last conv, 8 out channels", padded)
        from torch.profiler import ProfilerActivity, profile

        cuda = torch.cuda.is_available()
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            decoder(codes)
            sync()
    key = "cuda_time_total" if cuda else "cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60))


if __name__ == "__main__":
    main()
