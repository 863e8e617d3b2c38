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
from qtts.core.capacity.plan_job import GPUS
from qtts.core.jobs.contract.spec import DEFAULT_SEGMENT_PAUSE_S, Split


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
    from qtts.core.capacity.plan_job import plan_job

    setup_logging(quiet=False, verbose=False)
    with cli_errors():
        columns = column_options(id_column, text_column, column)
        if input is None and columns.renamed:
            raise typer.BadParameter(f"{columns.flag(next(iter(columns.renamed)))} needs INPUT")
        lines, out, refusal = plan_job(
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
