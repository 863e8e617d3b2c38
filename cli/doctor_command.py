"""`qtts doctor`: parse options, run qtts.core.doctor's checks, print a table on stderr and one
JSON line on stdout; exit 0 only if no check failed (skipped is fine)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from qtts.cli import options as o
from qtts.cli.errors import EXIT_FATAL, cli_errors
from qtts.cli.logs import setup_logging

SIZES = ("auto", "0.6b", "1.7b", "small")


def doctor(
    size: Annotated[
        str,
        typer.Option(
            help="Model dimensions (random weights): 0.6b or 1.7b (the published dims), small, or "
            "auto (0.6b on CUDA, small on CPU)."
        ),
    ] = "auto",
    device: o.Device = "auto",
) -> None:
    """Prove this install on its device in one command: versions; the fused layer path against
    the module path; Triton kernels against their torch twins; CUDA-graph replay against eager
    steps; bf16 against fp32 teacher-forced; measured memory bandwidth; one decode step and one
    speech-decoder window against their rooflines. On CPU the GPU-only checks say they were
    skipped. A table on stderr, one JSON
    line on stdout; exit 0 only if no check failed."""
    setup_logging(quiet=True, verbose=False)
    if size not in SIZES:
        raise typer.BadParameter(f"--size {size!r}: use {', '.join(SIZES)}")
    with cli_errors():
        rows = _run(size, device)
    ok = all(r["status"] != "failed" for r in rows)
    typer.echo(json.dumps({"doctor": rows, "ok": ok}))
    if not ok:
        raise typer.Exit(EXIT_FATAL)


def _run(size: str, device: str) -> list[dict]:
    from qtts.core.doctor.checks import doctor as run_doctor
    from qtts.core.model.loader import parse_device

    try:
        dev = parse_device(device)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if size == "auto":
        size = "0.6b" if dev.type == "cuda" else "small"
    typer.echo(f"qtts doctor: {size} dims, random weights, on {dev}", err=True)
    typer.echo(f"  {'check':36} {'status':8} {'s':>6}  detail", err=True)
    rows = []
    for check in run_doctor(dev, size):
        typer.echo(
            f"  {check.name:36} {check.status:8} {check.seconds:>6.1f}  {check.detail}", err=True
        )
        rows.append(check.row())
    failed = [r["name"] for r in rows if r["status"] == "failed"]
    typer.echo(f"failed: {', '.join(failed)}" if failed else "every check held", err=True)
    return rows
