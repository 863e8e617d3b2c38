"""`qtts bench --manifest FILE --model DIR`: the options a job's synthesis depends on, built into
a JobSpec by the job commands' own builders (qtts.cli.job_options), timed by
qtts.core.bench.manifest_bench; prints its lines and the final JSON line."""

from __future__ import annotations

import json

import typer

from qtts.cli.errors import cli_errors
from qtts.cli.job_options import failure_options, model_options, split_options, voice_options
from qtts.core.errors import UsageError
from qtts.core.jobs.contract.spec import (
    DEFAULT_SEGMENT_PAUSE_S,
    JobKind,
    JobSpec,
    OnBudget,
    OutputOptions,
    Split,
)


def run_manifest_bench(
    manifest: str,
    *,
    model: str | None,
    device: str,
    dtype,
    batch_size: str,
    max_new_tokens: int | None,
    split: Split,
    max_segment_tokens: int | None,
    on_budget: OnBudget | None,
    speaker: str | None,
    machine: dict,
) -> None:
    """machine: what `qtts bench` says of this machine (its JSON's "machine")."""
    from qtts.cli.commands import factories
    from qtts.core.bench.manifest_bench import bench_manifest

    with cli_errors():
        if model is None:
            raise UsageError("--manifest times a checkpoint's synthesis: give --model DIR")
        if "," in batch_size:
            raise UsageError(f"--batch-sizes {batch_size!r}: --manifest takes one, auto or N")
        spec = JobSpec(
            kind=JobKind.batch,
            source=manifest,
            output=OutputOptions(out_dir="unused"),  # bench_manifest writes nothing
            model=model_options(model, device, dtype, batch_size, max_new_tokens),
            voice=voice_options(speaker=speaker),
            failures=failure_options(on_budget=on_budget),
            split=split_options(split, max_segment_tokens, DEFAULT_SEGMENT_PAUSE_S),
        )
        open_text_model, load_synthesizer = factories()
        result = bench_manifest(spec, open_text_model, load_synthesizer)
    for line in result.describe():
        typer.echo(line)
    typer.echo(json.dumps({"bench_manifest": result.row(), "machine": machine}))
