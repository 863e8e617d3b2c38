"""`qtts results OUT`: rebuild OUT/results.parquet from every journal in OUT (all shards) and print
the summary as one JSON line: is the dataset complete?"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from qtts.cli.errors import EXIT_ROWS_FAILED, cli_errors


def results(
    out_dir: Annotated[Path, typer.Argument(help="The out dir of a qtts job (any of its shards).")],
    input_path: Annotated[
        Path | None,
        typer.Option(
            "--input", help="The job's input, if it moved (default: as the job recorded)."
        ),
    ] = None,
) -> None:
    """Rebuild results.parquet and metadata.jsonl from all of OUT's journals. stdout: one JSON line
    (total, ok, failed, pending, complete). Exit 0, or 3 when some rows failed."""
    with cli_errors():
        from qtts.core.jobs.results import rebuild_out_dir

        summary = rebuild_out_dir(out_dir, None if input_path is None else str(input_path))
    typer.echo(
        f"{summary['ok']} of {summary['total']} rows ok, {summary['failed']} failed, "
        f"{summary['pending']} pending" + (" (complete)" if summary["complete"] else ""),
        err=True,
    )
    typer.echo(json.dumps(summary))
    if summary["failed"]:
        raise typer.Exit(EXIT_ROWS_FAILED)
