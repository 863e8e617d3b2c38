"""The commands: synth (text lines), batch (a manifest), info (a checkpoint's voices).

Thin: the options arrive as typed groups (qtts.cli.job_options) and become a JobSpec; run_job
(imported inside the command, so `qtts --help` never imports torch) runs it with the model
factories; the one-line JSON summary goes to stdout and its exit code to the shell. The one test
hook lives here: QTTS_FAKE_SYNTH=<module> makes the factories come from that module (its
open_text_model / load_synthesizer), for subprocess tests.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from qtts.cli.errors import cli_errors
from qtts.cli.job_options import (
    JobOptions,
    column_options,
    job_command,
    scale_out_options,
    shard_options,
)
from qtts.cli.logs import setup_logging
from qtts.cli.progress import Progress
from qtts.core.jobs.contract.spec import JobKind

FAKE_ENV = "QTTS_FAKE_SYNTH"


def factories():
    """(open_text_model, load_synthesizer): the real ones, or QTTS_FAKE_SYNTH's module's."""
    name = os.environ.get(FAKE_ENV, "").strip()
    if name:
        module = importlib.import_module(name)
        return module.open_text_model, module.load_synthesizer
    from qtts.core.synthesis import session

    return session.open_text_model, session.load_synthesizer


def run_command(kind: JobKind, source: str, options: JobOptions) -> None:
    """Run one job (synth or batch) and exit with its code; the summary is stdout's JSON line."""
    report = options.report
    setup_logging(report.quiet, report.verbose)
    with cli_errors():
        from qtts.core.engine.device.knobs import read_knobs
        from qtts.core.jobs.execution.run import run_job

        read_knobs()  # a bad QTTS_* value is refused before the job takes its lock
        spec = options.spec(kind, source)

        progress = Progress(quiet=report.quiet, log_interval=report.log_interval)
        open_text_model, load_synthesizer = factories()
        summary = run_job(spec, open_text_model, load_synthesizer, progress)
    typer.echo(json.dumps(summary.as_dict()))
    if not spec.output.dry_run and summary.exit_code not in STOPPED_BY_SIGNAL:
        refresh_dataset_card(spec.output.out_dir)
    level = logging.WARNING if summary.exit_code else logging.INFO
    logging.getLogger("qtts").log(level, "%s", summary.describe())  # the last line: the outcome
    raise typer.Exit(summary.exit_code)


@job_command(scale_out=shard_options)
def synth(
    input: Annotated[
        str, typer.Argument(help="UTF-8 text file, one utterance per line; - = stdin.")
    ],
    options: JobOptions,
) -> None:
    """Speak each non-empty line of a text file: line n -> OUT/{n:06d}.wav (blank lines count)."""
    run_command(JobKind.synth, input, options)


@job_command(scale_out=scale_out_options, columns=column_options)
def batch(
    manifest: Annotated[
        str,
        typer.Argument(
            help=(
                "A .parquet file, a folder or glob of Parquet parts (one dataset, parts in "
                "sorted order), a JSON Lines file (.jsonl, .ndjson, NeMo's .json) or a "
                ".csv/.tsv file."
            )
        ),
    ],
    options: JobOptions,
) -> None:
    """Speak every row of a manifest: row -> OUT/{id}.wav, plus OUT/results.parquet.

    Columns: id (string, unique, filename-safe) and text are required; speaker, language,
    instruct, ref_audio, ref_text, voice (a voice file) and seed (int) are optional, a null
    taking the option's value.
    Other names map onto them with --id-column, --text-column and --column FIELD=NAME.
    """
    run_command(JobKind.batch, manifest, options)


def info(
    model: Annotated[str, typer.Argument(help="Local checkpoint dir or HF repo id.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Show a checkpoint's type, size, speakers, languages and sampling defaults."""
    setup_logging(quiet=False, verbose=False)
    with cli_errors():
        open_text_model, _ = factories()
        details = describe(open_text_model(model))
    if as_json:
        typer.echo(json.dumps(details))
        return
    for key, value in details.items():
        if isinstance(value, dict):
            typer.echo(f"{key}:")
            for k, v in value.items():
                typer.echo(f"  {k}: {_plain(v)}")
        else:
            typer.echo(f"{key}: {_plain(value)}")


def describe(tm) -> dict[str, Any]:
    cfg, d = tm.config, tm.defaults

    return {
        "model": tm.name,
        "type": cfg.tts_model_type,
        "size": model_size(cfg),
        "sample_rate": tm.sample_rate,
        "speakers": cfg.supported_speakers(),
        "languages": cfg.supported_languages(),
        "instruct": "honoured" if cfg.honours_instruct else "ignored (0.6B CustomVoice)",
        "talker_sampling": asdict(d.talker),
        "subtalker_sampling": asdict(d.subtalker),
        "max_new_tokens": d.max_new_tokens,
    }


def model_size(cfg) -> str:
    """0.6B / 1.7B when the dimensions are the published ones; else the layout and the dims."""
    from qtts.core.model.sizes import SIZES

    name = {"0b6": "0.6b", "1b7": "1.7b"}.get(cfg.tts_model_size)
    t = cfg.talker
    if name is not None and (t.hidden_size, t.num_hidden_layers) == (
        SIZES[name]["hidden"],
        SIZES[name]["layers"],
    ):
        return name.upper()
    layout = f"{name.upper()} layout" if name else "unknown layout"
    return f"{layout}, custom dimensions (talker {t.hidden_size} x {t.num_hidden_layers} layers)"


def _plain(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else "(none)"
    return str(value)


STOPPED_BY_SIGNAL = (130, 143)  # Ctrl-C, SIGTERM: exit as asked, the card waits for a rerun


def refresh_dataset_card(out_dir: Path) -> None:
    """The dataset card written where none is, or again for the views a run rebuilt (a warning,
    never the run's exit code, when it cannot be written). A signal meanwhile waits for it (a
    few seconds; a second one exits at once), so the run's summary line still ends its output."""
    from qtts.core.jobs.execution.interrupt import StopSignals
    from qtts.core.quality.dataset_card import refresh_card

    with StopSignals():
        refresh_card(out_dir)
