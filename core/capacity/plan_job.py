"""`qtts plan`'s work: a job's memory plan and duration on a card, without a GPU. From the options
the command parsed (the card or a custom one, a checkpoint or published dimensions, an input file
or synthetic rows), the plan by the planner a job uses, the report's lines and JSON, and the
refusal a job would meet when it does not fit. The command (cli/plan_command.py) prints them.
A bad combination of options is a UsageError (one line, exit 2).
"""

from __future__ import annotations

from qtts.core.errors import UsageError

GPUS = ("l4", "a10", "rtx4090", "l40s", "a100-40", "a100-80", "h100", "h200")
DTYPES = ("bfloat16", "float16", "float32")


def card(gpu: str, bandwidth, tflops):
    """The card to plan on: a known one by name, or --gpu custom with its bandwidth and rate."""
    from qtts.core.engine.plan.roofline import DEVICES, DeviceSpec

    if gpu == "custom":
        if bandwidth is None or tflops is None:
            raise UsageError("--gpu custom needs both --bandwidth and --tflops")
        return DeviceSpec(
            f"custom ({bandwidth} TB/s, {tflops} TFLOP/s)", bandwidth * 1e12, tflops * 1e12
        )
    if gpu not in DEVICES:
        raise UsageError(f"--gpu {gpu!r}: use {', '.join(GPUS)} or custom")
    if bandwidth is not None or tflops is not None:
        raise UsageError("--bandwidth and --tflops go with --gpu custom")
    return DEVICES[gpu]


def plan_job(
    *,
    source,
    model,
    size,
    gpu,
    gpu_memory,
    dtype,
    batch_size,
    text_tokens,
    rows,
    max_new_tokens,
    speaker,
    columns,
    bandwidth,
    tflops,
    split,
) -> tuple[list[str], dict, str | None]:
    """(report lines, the JSON, the refusal or None) of the job these options describe."""
    import torch

    from qtts.core.capacity.job_fit import input_shapes, plan_model, report, synthetic_shapes
    from qtts.core.engine.device.tuning import EngineTuning
    from qtts.core.engine.plan.planner import GIB, plan_memory
    from qtts.core.synthesis.memory_plan import refusal

    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(dtype)
    if dt is None:
        raise UsageError(f"--dtype {dtype!r}: use bfloat16, float16 or float32")
    if (model is None) == (size is None):
        raise UsageError("give either --model DIR or --size 0.6b|1.7b")
    if size not in (None, "0.6b", "1.7b"):
        raise UsageError(f"--size {size!r}: use 0.6b or 1.7b")
    spec = card(gpu, bandwidth, tflops)
    memory = gpu_memory or spec.memory_gib
    if memory is None:
        raise UsageError("--gpu custom needs --gpu-memory")
    m = plan_model(model, size, dt)
    counts = {}  # of an input file's requests, for the JSON's job
    if source is None:
        shapes, frames = synthetic_shapes(m, text_tokens, rows, max_new_tokens)
        what, total = f"{rows} rows of {text_tokens} text tokens", sum(frames)
    else:
        shapes, got, note = input_shapes(
            m, str(source), max_new_tokens, split=split, speaker=speaker, columns=columns
        )
        rows, total = got.rows, got.frames
        cut = f", {got.split_rows} split into segments" if got.split_rows else ""
        what = f"{rows} rows of {source} ({len(shapes)} requests{cut}; {note})"
        if got.refused:
            what += f"; {got.refused} rows refused as too long, as the job would"
        if got.more_chunks:
            what += "; memory planned for its first (longest) chunk, as the job plans each chunk"
        counts = {"requests": len(shapes), "split_rows": got.split_rows, "refused": got.refused}
    tuning = EngineTuning.for_device("cuda", env={})
    plan = plan_memory(
        shapes,
        m.dims,
        budget_bytes=int(memory * GIB),
        weights_bytes=m.weights_bytes,
        tuning=tuning,
        batch_size=batch_size,
        device_kind="cuda",
    )
    lines, out = report(plan, m, spec, rows, total)
    out.setdefault("job", {}).update(counts)
    header = f"qtts plan: {m.name} in {dtype} on {spec.name}, {memory:g} GiB, {what}"
    return (
        [header, *lines],
        {"model": m.name, "dtype": dtype, "gpu": gpu, **out},
        (None if plan.fits else refusal(plan, "cuda")),
    )
