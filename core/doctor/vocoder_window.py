"""One speech-decoder window timed against its roofline: the bucket every long row's windows take
(300 frames kept after 25 of context), through the path `qtts batch` takes here (a replayed CUDA
graph on GPU, the eager decoder on CPU), set against its lower bound on the measured machine:
FLOPs and bytes counted on the meta device (qtts.core.capacity.vocoder_cost) over the measured
matmul rate and bandwidth. A figure only: it fails only when it cannot run."""

from __future__ import annotations

import torch

from qtts.core.bench.machine import seconds_per_call
from qtts.core.capacity.vocoder_cost import vocoder_cost
from qtts.core.doctor.runner import Check, DoctorRun
from qtts.core.doctor.speed import doctor_models, measured_machine
from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.plan.roofline import FRAME_S
from qtts.core.engine.vocoder.decoder_kernels import with_kernels
from qtts.core.engine.vocoder.vocoder_graphs import GraphedVocoder
from qtts.core.engine.vocoder.vocoder_windows import CHUNK_FRAMES, LEFT_CONTEXT
from qtts.core.model.loader import parse_dtype

WINDOW_ROWS = {"cpu": 1, "cuda": 8}  # the rows decoded together: a power of two, as every call
REPEATS = {"cpu": 1, "cuda": 5}  # the CPU's window takes about half a second at the small dims


def vocoder_window(run: DoctorRun) -> Check:
    dev = run.device
    dt = parse_dtype("auto", dev)
    tuning = EngineTuning.for_device(dev)
    decoder = with_kernels(  # as a job decodes
        doctor_models(run)[2], gemm=tuning.decoder_gemm, choices=tuning.decoder_conv_choices
    )
    graphs = tuning.cuda_graphs
    rows, frames = WINDOW_ROWS[dev.type], CHUNK_FRAMES + LEFT_CONTEXT
    forward = GraphedVocoder(decoder, rows) if graphs else decoder
    gen = torch.Generator(device=dev).manual_seed(0)
    codes = torch.randint(
        0,
        decoder.cfg.codebook_size,
        (rows, decoder.cfg.num_quantizers, frames),
        generator=gen,
        device=dev,
    )
    with torch.inference_mode():  # the first call warms up (and on GPU captures the graph)
        seconds = seconds_per_call(lambda: forward(codes), dev, REPEATS[dev.type])
    replayed = graphs and bool(forward.graphs)  # False: a capture failed (and was logged)
    cost, spec = vocoder_cost(decoder.cfg, dt), measured_machine(run)
    audio_s = rows * CHUNK_FRAMES * FRAME_S  # what the window keeps
    flops, moved = cost.flops_per_audio_s * audio_s, cost.bytes_per_audio_s(rows) * audio_s
    bounds = {"compute": flops / spec.flops, "memory": moved / spec.bandwidth}
    bound_s = max(bounds.values())
    dtype = str(dt).removeprefix("torch.")
    path = "graph replay" if replayed else "eager"
    figures = {
        "size": run.size,
        "dtype": dtype,
        "path": path,
        "rows": rows,
        "frames": frames,
        "window_ms": round(seconds * 1e3, 3),
        "bound_ms": round(bound_s * 1e3, 3),
        "bound_by": max(bounds, key=bounds.get),
        "fraction": round(bound_s / seconds, 4),
        "gflop": round(flops / 1e9, 3),
        "gb_moved": round(moved / 1e9, 3),
        "audio_s_per_s": round(audio_s / seconds, 2),
    }
    detail = (
        f"{run.size} {dtype} {path}, {rows} x {CHUNK_FRAMES}+{LEFT_CONTEXT} frames: "
        f"{seconds * 1e3:.1f} ms, bound {bound_s * 1e3:.2f} ms ({figures['bound_by']}) = "
        f"{figures['fraction']:.1%} of the measured roofline"
    )
    if graphs and not replayed:  # qtts batch would run this GPU's vocoder without its graphs
        detail += "; the vocoder's CUDA graph capture failed (see the log)"
        return Check("vocoder window vs roofline", "failed", detail, figures)
    return Check("vocoder window vs roofline", "ok", detail, figures)
