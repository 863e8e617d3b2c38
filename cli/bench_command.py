"""`qtts bench`: parse options, run qtts.core.bench per batch size, print a table + JSON line;
with --manifest, a job's rows through a job's synthesis path instead (qtts.cli.bench_manifest)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from qtts.cli import options as o
from qtts.cli.errors import cli_errors
from qtts.cli.logs import setup_logging
from qtts.core.jobs.contract.spec import Split


def _parse_sizes(text: str) -> list[int | None]:
    """A comma list of slot counts; "auto" (None) is the memory plan's choice."""
    try:
        sizes = [None if x.strip() == "auto" else int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"--batch-sizes {text!r}: use a list like 1,16,64,auto") from None
    if not sizes or min((s for s in sizes if s is not None), default=1) < 1:
        raise typer.BadParameter("--batch-sizes: give positive integers or auto")
    return sizes


def bench(
    size: Annotated[
        str,
        typer.Option(
            help="Model dimensions: 0.6b, 1.7b, small, or auto (0.6b on CUDA; small on a CPU, "
            "where a 0.6b batch takes minutes)."
        ),
    ] = "auto",
    batch_sizes: Annotated[
        str | None,
        typer.Option(
            help="Comma list of slot counts; auto = the memory plan's choice. Unset: 1,16 "
            "(with --manifest: auto; one value there, as a job's --batch-size).",
            show_default=False,
        ),
    ] = None,
    frames: Annotated[
        int, typer.Option(min=2, help="Frames per request (fixed: EOS ignored).")
    ] = 128,
    requests: Annotated[
        int | None,
        typer.Option(min=1, help="Requests per batch size. Unset: --passes x batch size."),
    ] = None,
    passes: Annotated[
        int,
        typer.Option(
            min=1,
            help="Passes of a full batch each, when --requests is unset. The steady-state "
            "figure leaves out the first pass's fill; 8 or more keep the first fill and the "
            "last tail from dominating the whole-run figure.",
        ),
    ] = 2,
    device: o.Device = "auto",
    dtype: o.DtypeOpt = o.Dtype.auto,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Also run the eager module path (no CUDA graphs, no packed CPU weights); "
            "print fast/eager ratios.",
        ),
    ] = False,
    write: Annotated[bool, typer.Option(help="Encode each utterance as WAV (timed).")] = True,
    vocoder: Annotated[
        bool,
        typer.Option(
            help="Run the vocoder beside the decode loop, as a job does. --no-vocoder: decode "
            "only, to see what the vocoder costs the loop (no audio, no writing).",
        ),
    ] = True,
    manifest: Annotated[
        str | None,
        typer.Option(
            metavar="FILE",
            help="Time a job's rows instead: every row of this manifest through the synthesis "
            "path `qtts batch` runs (validation, budgets, length order, memory plan, engine, "
            "vocoder), writing nothing, on the checkpoint --model names. --size, --frames, "
            "--requests, --passes, --compare, --write and --vocoder do not apply.",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="With --manifest: the checkpoint.")
    ] = None,
    max_new_tokens: o.MaxNewTokens = None,
    split: o.SplitOpt = Split.auto,
    max_segment_tokens: o.MaxSegmentTokens = None,
    on_budget: o.OnBudgetOpt = None,
    speaker: o.Speaker = None,
    count_launches: Annotated[
        bool,
        typer.Option(
            "--count-launches",
            help="Instead of timing: count the kernel launches of one sampled decode step and of "
            "one padded prefill pass on the path the GPU runs (meta device: no GPU, no memory), "
            "split by phase.",
        ),
    ] = False,
) -> None:
    """Throughput on random weights of the real model sizes (no download): audio-s/s, frames/s,
    RTF, per-phase time, ms per decode step, peak memory (GPU, or RSS on CPU). The last stdout
    line is JSON."""
    from qtts.core.bench.size_runs import auto_size, count_sizes, machine_info, run_sizes

    setup_logging(quiet=False, verbose=False)
    if manifest is not None:
        from qtts.cli.bench_manifest import run_manifest_bench

        if count_launches or compare:
            raise typer.BadParameter("--manifest: no --compare or --count-launches")
        return run_manifest_bench(
            manifest,
            model=model,
            device=device,
            dtype=dtype,
            batch_size=batch_sizes or "auto",
            max_new_tokens=max_new_tokens,
            split=split,
            max_segment_tokens=max_segment_tokens,
            on_budget=on_budget,
            speaker=speaker,
            machine=machine_info(device),
        )
    sizes = _parse_sizes(batch_sizes or "1,16")
    if size not in ("0.6b", "1.7b", "small", "auto"):
        raise typer.BadParameter(f"--size {size!r}: use 0.6b, 1.7b, small or auto")
    if size == "auto":
        size, said = auto_size(device, count_launches)
        if said:
            typer.echo(said, err=True)
    if count_launches:
        if None in sizes:
            raise typer.BadParameter("--count-launches: give batch sizes as numbers, not auto")
        with cli_errors():
            rows = count_sizes(size, sizes, typer.echo)
        typer.echo(json.dumps({"launches": rows}))
        return
    with cli_errors():
        rows = run_sizes(
            size,
            sizes,
            frames=frames,
            requests=requests,
            passes=passes,
            device=device,
            dtype=dtype.value,
            compare=compare,
            write=write,
            vocoder=vocoder,
            emit=typer.echo,
        )
    typer.echo(json.dumps({"bench": rows, "machine": machine_info(device)}))
