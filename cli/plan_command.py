"""`qtts plan`: parse options, run qtts.core.bench.plan, print the table and a final JSON line.

No GPU and no model allocation needed: plan a job before spending GPU hours on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from qtts.cli import options as o
from qtts.cli.errors import cli_errors

DEVICE_NAMES = ("h100", "h200", "a100", "l40s")


def plan(
    source: Annotated[
        Path | None,
        typer.Argument(help="Text file or Parquet manifest to plan for [default: --text-tokens]."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Checkpoint dir (or cached HF repo id).")
    ] = None,
    size: Annotated[
        str | None, typer.Option(help="Published dimensions instead of a checkpoint: 0.6b, 1.7b.")
    ] = None,
    gpu_memory: Annotated[float, typer.Option(help="GPU memory to plan for, in GiB.")] = 80.0,
    dtype: Annotated[str, typer.Option(help="bfloat16, float16 or float32.")] = "bfloat16",
    batch_size: o.BatchSize = "auto",
    text_tokens: Annotated[
        int, typer.Option(min=1, help="Without INPUT: text tokens per row.")
    ] = 200,
    rows: Annotated[int, typer.Option(min=1, help="Without INPUT: how many such rows.")] = 1024,
    max_new_tokens: o.MaxNewTokens = None,
    speaker: Annotated[
        str | None, typer.Option(help="CustomVoice speaker for INPUT rows (any: same length).")
    ] = None,
    device: Annotated[
        str, typer.Option(help=f"Roofline device: {', '.join(DEVICE_NAMES)}, or custom.")
    ] = "h100",
    bandwidth: Annotated[
        float | None, typer.Option(help="Custom roofline device: memory bandwidth in TB/s.")
    ] = None,
    tflops: Annotated[
        float | None, typer.Option(help="Custom roofline device: dense TFLOP/s in --dtype.")
    ] = None,
) -> None:
    """Plan a job's GPU memory (slots, KV per length group, graphs, vocoder batch) and its decode
    step's roofline, without a GPU. The last stdout line is JSON (fits, slots, *_bytes, groups)."""
    with cli_errors():
        lines, out = _run(source, model, size, gpu_memory, dtype, o.parse_batch_size(batch_size),
                          text_tokens, rows, max_new_tokens, speaker, device, bandwidth,
                          tflops)  # fmt: skip
    for line in lines:
        typer.echo(line)
    typer.echo(json.dumps(out))


def _run(source, model, size, gpu_memory, dtype, batch_size, text_tokens, rows, max_new_tokens,
         speaker, device, bandwidth, tflops):  # fmt: skip
    import torch

    from qtts.core.bench.plan import input_shapes, plan_model, report, synthetic_shapes
    from qtts.core.engine.planner import GIB, plan_memory
    from qtts.core.engine.roofline import DEVICES, DeviceSpec
    from qtts.core.engine.settings import EngineSettings

    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(dtype)
    if dt is None:
        raise typer.BadParameter(f"--dtype {dtype!r}: use bfloat16, float16 or float32")
    if (model is None) == (size is None):
        raise typer.BadParameter("give either --model DIR or --size 0.6b|1.7b")
    if size not in (None, "0.6b", "1.7b"):
        raise typer.BadParameter(f"--size {size!r}: use 0.6b or 1.7b")
    if bandwidth is not None or tflops is not None:
        if bandwidth is None or tflops is None:
            raise typer.BadParameter("a custom device needs both --bandwidth and --tflops")
        spec = DeviceSpec(f"custom ({bandwidth} TB/s, {tflops} TFLOP/s)", bandwidth * 1e12,
                          tflops * 1e12)  # fmt: skip
    elif device in DEVICES:
        spec = DEVICES[device]
    else:
        raise typer.BadParameter(f"--device {device!r}: use {', '.join(DEVICES)} or --bandwidth")
    m = plan_model(model, size, dt)
    if source is None:
        shapes = synthetic_shapes(m, text_tokens, rows, max_new_tokens)
        what = f"{rows} rows of {text_tokens} text tokens"
    else:
        shapes, note = input_shapes(m, str(source), max_new_tokens, speaker)
        what = f"{len(shapes)} rows of {source} ({note})"
    settings = EngineSettings.for_device("cuda", env={})
    plan = plan_memory(shapes, m.dims, int(gpu_memory * GIB), m.weights_bytes, settings,
                       batch_size, "cuda")  # fmt: skip
    lines, out = report(plan, m, spec)
    header = f"qtts plan: {m.name} in {dtype} on a {gpu_memory:g} GiB GPU, {what}"
    return [header, *lines], {"model": m.name, "dtype": dtype, **out}
