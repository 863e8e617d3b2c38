"""What the device does, measured: its memory bandwidth (and matmul FLOP/s), and one decode step of
the path `qtts batch` takes, timed and set against the step's roofline on the measured machine
(`qtts bench`'s own functions). Figures only: these fail only when they cannot run."""

from __future__ import annotations

from qtts.core.bench.machine import measure
from qtts.core.bench.throughput import (
    bench_plan,
    fast_mode,
    random_models,
    roofline_fraction,
    run_one,
)
from qtts.core.doctor.runner import Check, DoctorRun
from qtts.core.model.loader import parse_dtype

STEP_BATCH = {"cpu": 2, "cuda": 16}
STEP_FRAMES = 8


def measured_machine(run: DoctorRun):
    """The measured machine, once per run: the bandwidth check's figure is the roofline's device."""
    if "spec" not in run.measured:
        run.measured["spec"] = measure(run.device, parse_dtype("auto", run.device))
    return run.measured["spec"]


def doctor_models(run: DoctorRun):
    """(config, model, decoder) with random weights at the run's size, built once per run."""
    if "models" not in run.measured:
        dev = run.device
        run.measured["models"] = random_models(run.size, dev, parse_dtype("auto", dev))
    return run.measured["models"]


def bandwidth(run: DoctorRun) -> Check:
    spec = measured_machine(run)
    dtype = str(parse_dtype("auto", run.device)).removeprefix("torch.")
    figures = {
        "bandwidth_gb_s": round(spec.bandwidth / 1e9, 1),
        "matmul_tflop_s": round(spec.flops / 1e12, 3),
        "matmul_dtype": dtype,
    }
    return Check(
        "memory bandwidth",
        "ok",
        f"{figures['bandwidth_gb_s']:g} GB/s copy, "
        f"{figures['matmul_tflop_s']:g} TFLOP/s {dtype} matmul",
        figures,
    )


def decode_step(run: DoctorRun) -> Check:
    """One decode step at a small batch on the path `qtts batch` takes here (CUDA graphs over the
    fused ops on GPU; on CPU the layer path its dtype runs), its roofline bound and the fraction
    achieved."""
    dev = run.device
    dt = parse_dtype("auto", dev)
    models = doctor_models(run)
    mode = fast_mode(dev, dt)
    batch = STEP_BATCH[dev.type]
    config, model, decoder = models
    plan = bench_plan(
        config, model, decoder, device=dev, mode=mode, batch=batch, rows=batch, frames=STEP_FRAMES
    )
    res = run_one(
        run.size, *models, plan=plan, requests=batch, frames=STEP_FRAMES, device=dev, mode=mode
    )
    roof = roofline_fraction(res, models[0], dt.itemsize, measured_machine(run))
    dtype = str(dt).removeprefix("torch.")
    figures = {
        "size": run.size,
        "dtype": dtype,
        "mode": mode,
        "batch": res.batch,
        "view": res.view,
        "step_ms": res.step_ms,
        "roofline": roof,
    }
    detail = (
        f"{run.size} {dtype} {mode}, batch {res.batch}: {roof['step_ms']:.2f} ms per step, bound "
        f"{roof['bound_ms']:.2f} ms = {roof['fraction']:.1%} of the measured roofline"
    )
    return Check("decode step vs roofline", "ok", detail, figures)
