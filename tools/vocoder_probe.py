"""Where the speech decoder's time goes on a GPU: one full window (rows x 325 frames) of the
random-weight decoder at a real size, per audio-second, with its fast path added a piece at a time
(the layers; the one-pass SnakeBeta; SnakeBeta writing the causal convs' padding; the frame-rate
convolutions as cuBLAS products: what a job runs), that last one replayed as a CUDA graph (as a
job replays it) and, with --compile, the layers compiled by torch.compile for comparison; then
every convolution of the decoder alone at its input's shape, three ways (cuDNN as laid out now,
cuDNN in channels-last memory, and a matrix product where the conv is ungrouped), with what all
of them cost each at its fastest way, and a profiler table of the job's path. The last line is
JSON.

    python tools/vocoder_probe.py --size 0.6b --rows 8 [--dtype bfloat16] [--compile]

A diagnosis, not a bench: `qtts bench` and `qtts doctor` time the job's path end to end.
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch
import torch.nn.functional as F

from qtts.core.bench.throughput import random_models
from qtts.core.engine.vocoder.decoder_kernels import with_kernels
from qtts.core.engine.vocoder.vocoder_graphs import GraphedVocoder
from qtts.core.model.codec_modules import CausalConv1d, CausalConvTranspose1d, SnakeBeta
from qtts.kernels.snake_beta import snake_beta

FRAMES = 325  # a full later window: one chunk plus its left context
SECONDS_PER_FRAME = 0.08


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


def _snake_then_pad(x, log_alpha, log_beta, eps, left_pad=0):
    """The SnakeBeta op without the padding written by it: F.pad's copy after it, as before."""
    y = snake_beta(x, log_alpha, log_beta, eps)
    return F.pad(y, (left_pad, 0)) if left_pad else y


def variants(layers) -> dict[str, object]:
    """label -> a decoder: each adds one piece of the fast path to the one before."""
    snake_only = with_kernels(copy.deepcopy(layers), gemm=False)
    for module in snake_only.modules():
        if isinstance(module, SnakeBeta):
            module.cuda_op = _snake_then_pad
    return {
        "layers (SnakeBeta formula)": layers,
        "SnakeBeta kernel": snake_only,
        "+ padding written by SnakeBeta": with_kernels(copy.deepcopy(layers), gemm=False),
        "+ frame-rate convs as products (a job's)": with_kernels(copy.deepcopy(layers)),
    }


def conv_rows(decoder, codes, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """Each convolution of `decoder` (cuDNN's: the fast path without products) alone, at the
    input it gets in this window, three ways: cuDNN as the model lays it out ([B, C, T]); cuDNN
    in channels-last memory (the conv as 2-D on [B, C, 1, T] stored as [B, 1, T, C], input and
    weight converted outside the timing, as if the whole decoder kept that layout: its tensor-core
    kernels then need no layout copies); and every ungrouped one as a matrix product
    (core/engine/vocoder/conv_gemm.py, which a job's path runs for the frame-rate ones).
    (seconds per call by label, the largest |difference| of each other way from cuDNN's)."""
    from qtts.core.engine.vocoder.conv_gemm import causal_conv, causal_conv_transpose

    inputs: dict[str, torch.Tensor] = {}
    convs = {
        name: m
        for name, m in decoder.named_modules()
        if isinstance(m, (CausalConv1d, CausalConvTranspose1d))
    }
    hooks = [
        m.conv.register_forward_pre_hook(lambda _, a, n=n: inputs.setdefault(n, a[0]))
        for n, m in convs.items()
    ]  # fmt: skip  (the inner conv: its input is padded)
    decoder(codes)
    for h in hooks:
        h.remove()
    out: dict[str, float] = {}
    diffs = {"channels-last": 0.0, "product": 0.0}
    for name, module in convs.items():
        x, conv = inputs[name], module.conv
        shape = "x".join(map(str, x.shape))
        out[f"{name} [{shape}]: cuDNN"] = timed(lambda c=conv, x=x: c(x), repeats)
        want = conv(x)
        ways = {"channels-last": channels_last(conv, x)}
        if conv.groups == 1 and isinstance(module, CausalConv1d):
            ways["product"] = lambda c=conv, x=x: causal_conv(x, c.weight, c.bias, c.dilation[0])
        elif conv.groups == 1 and conv.kernel_size[0] in (conv.stride[0], 2 * conv.stride[0]):
            ways["product"] = lambda c=conv, x=x: causal_conv_transpose(
                x, c.weight, c.bias, c.stride[0]
            )
        for way, run in ways.items():
            got = run().reshape(want.shape[0], want.shape[1], -1)
            n = got.shape[-1]  # the product's transposed conv is trimmed: compare its samples
            diffs[way] = max(diffs[way], float((got - want[..., :n]).abs().max()))
            out[f"{name}: {way}"] = timed(run, repeats)
    return out, diffs


def channels_last(conv, x: torch.Tensor):
    """A call of `conv` (Conv1d or ConvTranspose1d) as its 2-D twin in channels-last memory on
    x [B, C, T]: cuDNN's NHWC kernels, input and weight converted once, here."""
    x4 = x.unsqueeze(2).contiguous(memory_format=torch.channels_last)  # [B, C, 1, T] as NHWC
    w4 = conv.weight.unsqueeze(2).contiguous(memory_format=torch.channels_last)
    stride, dilation = (1, conv.stride[0]), (1, conv.dilation[0])
    if isinstance(conv, torch.nn.ConvTranspose1d):
        return lambda: F.conv_transpose2d(
            x4, w4, conv.bias, stride=stride, groups=conv.groups, dilation=dilation
        )
    return lambda: F.conv2d(x4, w4, conv.bias, stride=stride, dilation=dilation, groups=conv.groups)


def conv_summary(rows: dict[str, float]) -> tuple[str, dict[str, str]]:
    """One line: every convolution's time in cuDNN against each at its fastest way, and how
    many each way wins; and that way by convolution."""
    best: dict[str, tuple[float, str]] = {}
    base = 0.0
    for label, seconds in rows.items():
        name, way = label.rsplit(": ", 1)
        name = name.split(" [")[0]
        if way == "cuDNN":
            base += seconds
        if name not in best or seconds < best[name][0]:
            best[name] = (seconds, way)
    fastest = sum(s for s, _ in best.values())
    wins = {w: sum(1 for _, v in best.values() if v == w) for _, w in best.values()}
    line = (
        f"all convolutions: cuDNN {base * 1e3:.2f} ms, each at its fastest {fastest * 1e3:.2f} ms"
        f" ({', '.join(f'{w} {n}' for w, n in sorted(wins.items()))})"
    )
    return line, {name: way for name, (_, way) in best.items()}


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
        print(f"{label:48} {seconds * 1e3:9.2f} ms  {rate}", flush=True)

    with torch.inference_mode():
        want = layers(codes)
        decoders = variants(layers)
        for label, decoder in decoders.items():
            report(label, timed(lambda d=decoder: d(codes), args.repeats))
        job = decoders["+ frame-rate convs as products (a job's)"]
        # Random weights: the difference says the paths decode alike, not how good the audio is.
        print(f"job's path vs layers: max |diff| {(job(codes) - want).abs().max():.4f}")
        if codes.is_cuda:
            graphed = GraphedVocoder(job, args.rows)
            report("graph replay (a job's)", timed(lambda: graphed(codes), args.repeats))
        if args.compile:
            t = time.perf_counter()
            compiled = torch.compile(layers, mode="max-autotune-no-cudagraphs")
            compiled(codes)
            sync()
            report("torch.compile: compile time", time.perf_counter() - t, per_audio=False)
            report("torch.compile(layers)", timed(lambda: compiled(codes), args.repeats))
        print("each convolution alone, at its input in this window:")
        cudnn = decoders["+ padding written by SnakeBeta"]
        rows, diffs = conv_rows(cudnn, codes, args.repeats)
        for label, seconds in rows.items():
            report("  " + label, seconds, per_audio=False)
        line, fastest = conv_summary(rows)
        print(line)
        print("largest |diff| from cuDNN: " + ", ".join(f"{k} {v:.4f}" for k, v in diffs.items()))
        from torch.profiler import ProfilerActivity, profile

        cuda = torch.cuda.is_available()
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            job(codes)
            sync()
    key = "cuda_time_total" if cuda else "cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60))
    per_audio = {k: round(v / 1e3 / audio_s * 1e3, 4) for k, v in figures.items()}
    print(json.dumps({"size": args.size, "rows": args.rows, "frames": FRAMES, "dtype": args.dtype,
                      "ms": figures, "ms_per_audio_s": per_audio,
                      "fastest_conv_way": fastest, "conv_diffs": diffs}))  # fmt: skip


if __name__ == "__main__":
    main()
