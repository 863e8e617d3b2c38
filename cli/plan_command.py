"""`qtts plan`: parse options, run qtts.core.capacity.job_fit, print tables and a final JSON line.

No GPU and no model allocation needed: plan a job before spending GPU hours on it, on the card
you would rent. Exits as `qtts batch` would: 2 when the job does not fit, naming the largest batch
size that does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from qtts.cli import options as o
from qtts.cli.errors import cli_errors
from qtts.cli.job_options import column_options, split_options
from qtts.cli.logs import setup_logging
from qtts.core.jobs.choices import Split
from qtts.core.jobs.spec import DEFAULT_SEGMENT_PAUSE_S

GPUS = ("l4", "a10", "rtx4090", "l40s", "a100-40", "a100-80", "h100", "h200")


def plan(
    input: Annotated[
        Path | None,
        typer.Argument(
            help="Text file, or a manifest as qtts batch reads it, to plan for. Unset: "
            "--text-tokens."
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Checkpoint dir (or cached HF repo id).")
    ] = None,
    size: Annotated[
        str | None, typer.Option(help="Published dimensions instead of a checkpoint: 0.6b, 1.7b.")
    ] = None,
    gpu: Annotated[
        str,
        typer.Option(help=f"The card: {', '.join(GPUS)}, or custom (with --bandwidth, --tflops)."),
    ] = "h100",
    gpu_memory: Annotated[
        float | None, typer.Option(min=1.0, help="GiB to plan for. Unset: the card's memory.")
    ] = None,
    dtype: Annotated[str, typer.Option(help="bfloat16, float16 or float32.")] = "bfloat16",
    batch_size: o.BatchSize = "auto",
    text_tokens: Annotated[
        int,
        typer.Option(min=1, help="Without INPUT: text tokens per row (planned whole, never cut)."),
    ] = 200,
    rows: Annotated[int, typer.Option(min=1, help="Without INPUT: how many such rows.")] = 1024,
    max_new_tokens: o.MaxNewTokens = None,
    speaker: Annotated[
        str | None, typer.Option(help="CustomVoice speaker for INPUT rows (any: same length).")
    ] = None,
    id_column: o.IdColumn = None,
    text_column: o.TextColumn = None,
    column: o.ColumnMap = None,
    bandwidth: Annotated[
        float | None, typer.Option(min=0.001, help="--gpu custom: memory bandwidth in TB/s.")
    ] = None,
    tflops: Annotated[
        float | None, typer.Option(min=0.001, help="--gpu custom: dense TFLOP/s in --dtype.")
    ] = None,
    split: o.SplitOpt = Split.auto,
    max_segment_tokens: o.MaxSegmentTokens = None,
    segment_pause: o.SegmentPause = DEFAULT_SEGMENT_PAUSE_S,
) -> None:
    """Plan a job's GPU memory (slots, KV per length group, graphs, vocoder batch), its decode
    step's roofline and the job's duration at that ceiling, without a GPU. INPUT's long rows are
    cut into segments as the job cuts them (--split), its columns found as qtts batch finds them
    (--text-column, --id-column, --column). The last stdout line is JSON; exit 2 when the job
    does not fit the card."""
    setup_logging(quiet=False, verbose=False)
    with cli_errors():
        columns = column_options(id_column, text_column, column)
        if input is None and columns.renamed:
            raise typer.BadParameter(f"{columns.flag(next(iter(columns.renamed)))} needs INPUT")
        lines, out, refusal = _run(
            source=input,
            model=model,
            size=size,
            gpu=gpu,
            gpu_memory=gpu_memory,
            dtype=dtype,
            batch_size=o.parse_batch_size(batch_size),
            text_tokens=text_tokens,
            rows=rows,
            max_new_tokens=max_new_tokens,
            speaker=speaker,
            columns=columns,
            bandwidth=bandwidth,
            tflops=tflops,
            split=split_options(split, max_segment_tokens, segment_pause),
        )
    for line in lines:
        typer.echo(line)
    typer.echo(json.dumps(out))
    if refusal is not None:
        typer.echo(f"Error: {refusal}", err=True)
        raise typer.Exit(2)


def _device(gpu: str, bandwidth, tflops):
    from qtts.core.engine.plan.roofline import DEVICES, DeviceSpec

    if gpu == "custom":
        if bandwidth is None or tflops is None:
            raise typer.BadParameter("--gpu custom needs both --bandwidth and --tflops")
        return DeviceSpec(
            f"custom ({bandwidth} TB/s, {tflops} TFLOP/s)", bandwidth * 1e12, tflops * 1e12
        )
    if gpu not in DEVICES:
        raise typer.BadParameter(f"--gpu {gpu!r}: use {', '.join(GPUS)} or custom")
    if bandwidth is not None or tflops is not None:
        raise typer.BadParameter("--bandwidth and --tflops go with --gpu custom")
    return DEVICES[gpu]


def _run(
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
):
    import torch

    from qtts.core.capacity.job_fit import input_shapes, plan_model, report, synthetic_shapes
    from qtts.core.engine.device.settings import EngineSettings
    from qtts.core.engine.plan.planner import GIB, plan_memory
    from qtts.core.synthesis.memory_plan import refusal

    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(dtype)
    if dt is None:
        raise typer.BadParameter(f"--dtype {dtype!r}: use bfloat16, float16 or float32")
    if (model is None) == (size is None):
        raise typer.BadParameter("give either --model DIR or --size 0.6b|1.7b")
    if size not in (None, "0.6b", "1.7b"):
        raise typer.BadParameter(f"--size {size!r}: use 0.6b or 1.7b")
    spec = _device(gpu, bandwidth, tflops)
    memory = gpu_memory or spec.memory_gib
    if memory is None:
        raise typer.BadParameter("--gpu custom needs --gpu-memory")
    m = plan_model(model, size, dt)
    counts = {}  # of an input file's requests, for the JSON's job
    if source is None:
        shapes, frames = synthetic_shapes(m, text_tokens, rows, max_new_tokens)
        what, total = f"{rows} rows of {text_tokens} text tokens", sum(frames)
    else:
        shapes, got, note = input_shapes(m, str(source), max_new_tokens, split, speaker, columns)
        rows, total = got.rows, got.frames
        cut = f", {got.split_rows} split into segments" if got.split_rows else ""
        what = f"{rows} rows of {source} ({len(shapes)} requests{cut}; {note})"
        if got.refused:
            what += f"; {got.refused} rows refused as too long, as the job would"
        if got.more_chunks:
            what += "; memory planned for its first (longest) chunk, as the job plans each chunk"
        counts = {"requests": len(shapes), "split_rows": got.split_rows, "refused": got.refused}
    settings = EngineSettings.for_device("cuda", env={})
    plan = plan_memory(
        shapes,
        m.dims,
        budget_bytes=int(memory * GIB),
        weights_bytes=m.weights_bytes,
        settings=settings,
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
