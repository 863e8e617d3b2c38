"""The CLI in process, as the CLI tests call it: a run, its JSON summary, its records by id."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from typer.testing import CliRunner

from qtts.cli.app import app


def qtts(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def summary(result) -> dict:
    return json.loads(result.stdout.strip().splitlines()[-1])


def results(out) -> dict[str, dict]:
    return {r["id"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}
