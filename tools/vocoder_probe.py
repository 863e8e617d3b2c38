"""Where the speech decoder's time goes on a GPU: one full window (rows x 325 frames) of the
random-weight decoder at a real size, per audio-second, with its kernels added one at a time
(none; the one-pass SnakeBeta; the fused tail; the fused residual units up to 96, then up to 192
channels: what a job runs), that last one replayed as a CUDA graph (as a job replays it) and,
with --compile, the layers compiled by torch.compile for comparison; each fused op alone against
the layers it replaces, at a few launch shapes (samples and warps per program), and the residual
unit without its first SnakeBeta (the kernel recomputes it for each of its 7 taps: this row says
what that costs; not a unit's output); and a profiler
table of the job's path. The last line is JSON.

    python tools/vocoder_probe.py --size 0.6b --rows 8 [--dtype bfloat16] [--compile]

A diagnosis, not a bench: `qtts bench` and `qtts doctor` time the job's path end to end.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time

import torch

from qtts.core.bench.throughput import random_models
from qtts.core.engine.decoder_kernels import with_kernels
from qtts.core.engine.vocoder_graphs import GraphedVocoder
from qtts.core.model.codec_modules import SNAKE_EPS, ResidualUnit
from qtts.kernels import residual_unit as unit_kernel
from qtts.kernels import snake_conv_out as tail_kernel

FRAMES = 325  # a full later window: one chunk plus its left context
SECONDS_PER_FRAME = 0.08
# Launch shapes (samples, warps per program) tried for each fused op, the default first; each is
# checked against the default's output before it is timed. Units: the narrowest width (96 at the
# published sizes), then the next (192).
UNIT_SHAPES = ([None, (64, 8), (128, 16), (64, 4)], [None, (32, 8), (32, 16), (64, 8)])
TAIL_SHAPES = [None, (128, 4), (512, 8), (256, 8)]
# The variants a window is timed with: (unit_channels, tail), SnakeBeta's kernel in all.
VARIANTS = {
    "SnakeBeta kernel": (0, False),
    "+ fused tail": (0, True),
    "+ units <= 96": (96, True),
    "+ units <= 192 (a job's)": (192, True),
}


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, repeats: int) -> float:
    """Mean seconds per call, after two warm-up calls."""
    for _ in range(2):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - t) / repeats


def op_rows(decoder, rows: int, repeats: int) -> dict[str, float]:
    """Each fused op alone on one window's activation, its layers first, then each launch shape
    (checked equal to the default's output first): seconds per call."""
    out = {}
    up = math.prod((*decoder.cfg.upsampling_ratios, *decoder.cfg.upsample_rates))
    dev, dt = decoder.decoder[0].conv.weight.device, decoder.decoder[0].conv.weight.dtype
    fused = [m for m in decoder.modules() if isinstance(m, ResidualUnit) and m.cuda_op]
    widths = sorted({u.conv1.conv.in_channels for u in fused})[:2]
    # Samples per frame: the narrowest width runs at the audio rate, the next one block earlier.
    rates = (up, up // decoder.cfg.upsample_rates[-1])
    for channels, shapes, rate in zip(widths, UNIT_SHAPES, rates, strict=False):
        unit = [u for u in fused if u.conv1.conv.in_channels == channels][-1]  # dilation 9
        x = torch.randn(rows, channels, FRAMES * rate, device=dev, dtype=dt)
        c1, c2 = unit.conv1.conv, unit.conv2.conv
        args = (x, unit.act1.alpha, unit.act1.beta, c1.weight, c1.bias, c1.dilation[0],
                unit.act2.alpha, unit.act2.beta, c2.weight, c2.bias, SNAKE_EPS)  # fmt: skip
        saved, unit.cuda_op = unit.cuda_op, None
        out[f"unit {channels}: layers"] = timed(lambda: unit(x), repeats)  # noqa: B023
        unit.cuda_op = saved
        want = unit_kernel.residual_unit_triton(*args)
        for shape in shapes:
            kw = {} if shape is None else {"block": shape[0], "warps": shape[1]}
            torch.testing.assert_close(unit_kernel.residual_unit_triton(*args, **kw), want)
            label = "default" if shape is None else f"{shape[0]} x {shape[1]} warps"
            run = lambda kw=kw, args=args: unit_kernel.residual_unit_triton(*args, **kw)  # noqa: E731
            out[f"unit {channels}: kernel {label}"] = timed(run, repeats)
        bare = lambda args=args: unit_kernel.residual_unit_triton(*args, snake_input=False)  # noqa: E731
        out[f"unit {channels}: kernel without its 7x SnakeBeta"] = timed(bare, repeats)
    *_, snake, conv = decoder.decoder
    x = torch.randn(rows, snake.alpha.shape[0], FRAMES * up, device=dev, dtype=dt)
    args = (x, snake.alpha, snake.beta, conv.conv.weight, conv.conv.bias, SNAKE_EPS)
    out["tail: layers"] = timed(lambda: conv(snake(x)).clamp(-1.0, 1.0), repeats)
    want = tail_kernel.snake_conv_out_triton(*args)
    for shape in TAIL_SHAPES:
        kw = {} if shape is None else {"block": shape[0], "warps": shape[1]}
        torch.testing.assert_close(tail_kernel.snake_conv_out_triton(*args, **kw), want)
        label = "default" if shape is None else f"{shape[0]} x {shape[1]} warps"
        out[f"tail: kernel {label}"] = timed(
            lambda kw=kw: tail_kernel.snake_conv_out_triton(*args, **kw), repeats
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="0.6b")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile's decoder")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    _, _, layers = random_models(args.size, args.device, dtype)
    q, size = layers.cfg.num_quantizers, layers.cfg.codebook_size
    codes = torch.randint(0, size, (args.rows, q, FRAMES), device=args.device)
    audio_s = args.rows * FRAMES * SECONDS_PER_FRAME
    figures: dict[str, float] = {}

    def report(label: str, seconds: float, per_audio: bool = True) -> None:
        figures[label] = round(seconds * 1e3, 4)
        rate = f"{seconds / audio_s * 1e3:6.3f} ms per audio-s" if per_audio else ""
        print(f"{label:36} {seconds * 1e3:9.2f} ms  {rate}", flush=True)

    with torch.inference_mode():
        report("layers (SnakeBeta formula)", timed(lambda: layers(codes), args.repeats))
        want = layers(codes)
        decoder = copy.deepcopy(layers)
        for label, (units, tail) in VARIANTS.items():
            with_kernels(decoder, unit_channels=units, tail=tail)
            report(label, timed(lambda: decoder(codes), args.repeats))
        # Random weights: the audio is a check that the variants decode, not a quality figure.
        print(f"job's kernels vs layers: max |diff| {(decoder(codes) - want).abs().max():.4f}")
        if codes.is_cuda:
            graphed = GraphedVocoder(decoder, args.rows)
            report("graph replay (a job's)", timed(lambda: graphed(codes), args.repeats))
        if args.compile:
            t = time.perf_counter()
            compiled = torch.compile(layers, mode="max-autotune-no-cudagraphs")
            compiled(codes)
            sync()
            report("torch.compile: compile time", time.perf_counter() - t, per_audio=False)
            report("torch.compile(layers)", timed(lambda: compiled(codes), args.repeats))
        print("fused ops alone, one window's activation:")
        for label, seconds in op_rows(decoder, args.rows, args.repeats).items():
            report("  " + label, seconds, per_audio=False)
        from torch.profiler import ProfilerActivity, profile

        cuda = torch.cuda.is_available()
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            decoder(codes)
            sync()
    key = "cuda_time_total" if cuda else "cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60))
    per_audio = {k: round(v / 1e3 / audio_s * 1e3, 4) for k, v in figures.items()}
    print(json.dumps({"size": args.size, "rows": args.rows, "frames": FRAMES, "dtype": args.dtype,
                      "ms": figures, "ms_per_audio_s": per_audio}))  # fmt: skip


if __name__ == "__main__":
    main()
