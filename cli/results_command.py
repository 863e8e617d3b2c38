"""`qtts results OUT`: rebuild OUT/results.parquet from every journal in OUT (all shards) and print
the summary as one JSON line: is the dataset complete, and what is its quality? Keep rules
(`--min-dnsmos 3.0 --max-cer 0.1`, ...) choose which ok rows metadata.jsonl lists, for this
rebuild and every later one; `--report FILE.html` draws the distributions and says where; the
dataset card OUT/README.md is written afresh (core/quality/dataset_card.py). An out dir it cannot
write is read as it is, nothing written there (core/jobs/output/results.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer

from qtts.cli.errors import EXIT_ROWS_FAILED, cli_errors

KEEP_PANEL = "Keep rules (which ok rows metadata.jsonl lists; saved for later rebuilds)"
log = logging.getLogger("qtts")


def _bound(option: str, text: str, low: float | None = 0.0, high: float | None = None):
    return Annotated[
        float | None,
        typer.Option(f"--{option}", min=low, max=high, help=text, rich_help_panel=KEEP_PANEL),
    ]


MinDnsmos = _bound("min-dnsmos", "Keep rows with dnsmos_ovrl at least this (qtts score).", 1, 5)
MaxCer = _bound("max-cer", "Keep rows with cer at most this (qtts score --asr-model).")
MaxWer = _bound("max-wer", "Keep rows with wer at most this (qtts score --asr-model).")
MaxRepeat = _bound("max-repeat-ratio", "Keep rows with repeat_ratio at most this.", 0, 1)
MaxSilence = _bound("max-silence-ratio", "Keep rows with silence_ratio at most this.", 0, 1)
MinRate = _bound("min-chars-per-s", "Keep rows with chars_per_s at least this.")
MaxRate = _bound("max-chars-per-s", "Keep rows with chars_per_s at most this.")
MinSpeakerSim = _bound(
    "min-speaker-sim", "Keep rows with speaker_sim at least this (qtts score).", -1, 1
)
MinCentroid = _bound(
    "min-speaker-centroid",
    "Keep rows with speaker_sim_centroid at least this: no drift from the voice's other rows.",
    -1,
    1,
)
MinRateRatio = _bound(
    "min-rate-ratio", "Keep rows whose slowest piece speaks at least this x its voice's median."
)
MaxRateRatio = _bound(
    "max-rate-ratio", "Keep rows whose fastest piece speaks at most this x its voice's median."
)


def results(
    out_dir: Annotated[Path, typer.Argument(help="The out dir of a qtts job (any of its shards).")],
    input_path: Annotated[
        Path | None,
        typer.Option(
            "--input", help="The job's input, if it moved (default: as the job recorded)."
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="Also write the distributions as a page (FILE.html)."),
    ] = None,
    min_dnsmos: MinDnsmos = None,
    max_cer: MaxCer = None,
    max_wer: MaxWer = None,
    max_repeat_ratio: MaxRepeat = None,
    max_silence_ratio: MaxSilence = None,
    min_chars_per_s: MinRate = None,
    max_chars_per_s: MaxRate = None,
    min_speaker_sim: MinSpeakerSim = None,
    min_speaker_centroid: MinCentroid = None,
    min_rate_ratio: MinRateRatio = None,
    max_rate_ratio: MaxRateRatio = None,
    no_budget_hits: Annotated[
        bool,
        typer.Option(
            "--no-budget-hits",
            help="Leave out rows kept at their frame budget (--on-budget ok).",
            rich_help_panel=KEEP_PANEL,
        ),
    ] = False,
    keep_all: Annotated[
        bool,
        typer.Option("--keep-all", help="Clear the saved keep rules.", rich_help_panel=KEEP_PANEL),
    ] = False,
) -> None:
    """Rebuild results.parquet and metadata.jsonl from all of OUT's journals; on stderr, the
    counts and a quality summary (percentiles, rows outside named thresholds). Keep rules given
    here replace the saved ones; results.parquet keeps every row either way (`kept` says which
    pass). An out dir this process cannot write (a read-only mount) is read as it is, its views
    left unrebuilt. Also writes OUT/README.md, a dataset card, so that load_dataset(OUT) loads
    the kept rows (a README.md of your own is left alone: the card goes to OUT/.qtts/). stdout:
    one JSON line (total, ok, failed, pending, complete: no row pending, kept: the ok rows the
    keep rules keep, rebuilt, card, quality). Exit 0; 3 when some rows failed or the keep rules
    keep no ok row."""
    given = {
        "min-dnsmos": min_dnsmos,
        "max-cer": max_cer,
        "max-wer": max_wer,
        "max-repeat-ratio": max_repeat_ratio,
        "max-silence-ratio": max_silence_ratio,
        "min-chars-per-s": min_chars_per_s,
        "max-chars-per-s": max_chars_per_s,
        "min-speaker-sim": min_speaker_sim,
        "min-speaker-centroid": min_speaker_centroid,
        "min-rate-ratio": min_rate_ratio,
        "max-rate-ratio": max_rate_ratio,
    }
    bounds = {k: v for k, v in given.items() if v is not None}
    with cli_errors():
        from qtts.core.errors import UsageError
        from qtts.core.jobs.output.results import (
            KeepRules,
            check_no_killed_switch,
            current_views,
            read_keep_rules,
            require_job,
        )
        from qtts.core.quality.dataset_summary import summarize_results, summary_lines

        if report is not None:
            _check_report_target(report)
        if keep_all and (bounds or no_budget_hits):
            raise UsageError("--keep-all clears the keep rules: give it without rules")
        check_no_killed_switch(out_dir)  # loaders would get part of the rows
        changing = keep_all or bounds or no_budget_hits
        if changing:  # before the rules are saved; the rebuild checks it again
            require_job(out_dir)
        if changing:
            _save_rules(out_dir, KeepRules(bounds, no_budget_hits))
        source = None if input_path is None else str(input_path)
        with current_views(out_dir, source) as views:
            card = None if views.not_rebuilt else _write_card(out_dir)
            # the card's summary where it wrote one: results.parquet summarized once
            quality = card.quality if card is not None else summarize_results(views.results)
            summary, rules = views.summary, read_keep_rules(out_dir)
            _warn_unscored(rules, views.results)
            if report is not None:
                from qtts.core.quality.report import write_report

                write_report(views.results, report, quality, rules, out_dir)
    if views.not_rebuilt:
        typer.echo(
            f"Note: {out_dir} cannot be written here ({views.not_rebuilt}): its results.parquet "
            "and metadata.jsonl were not rebuilt; the counts and quality below are read from "
            "its state as it is",
            err=True,
        )
    typer.echo(
        f"{summary['ok']} of {summary['total']} rows ok, {summary['failed']} failed, "
        f"{summary['pending']} pending" + (" (complete)" if summary["complete"] else ""),
        err=True,
    )
    for line in summary_lines(quality):
        typer.echo(line, err=True)
    _warn_nothing_kept(rules, quality, card)
    if card is not None and card.own_readme:
        typer.echo(
            f"Note: {out_dir / 'README.md'} is not a qtts dataset card, so it was left as it is; "
            f"the card went to {card.path} (copy its YAML header into yours for "
            "load_dataset(OUT))",
            err=True,
        )
    if report is not None:
        typer.echo(f"wrote the quality report to {report.resolve()}", err=True)
        summary = {**summary, "report": str(report.resolve())}
    if card is not None:
        summary = {**summary, "card": str(card.path)}
    kept = quality["ok"] if quality["kept"] is None else quality["kept"]  # None: no rules
    typer.echo(json.dumps({**summary, "kept": kept, "quality": quality}))
    if summary["failed"] or (summary["ok"] and not kept):  # a failure, or nothing to train on
        raise typer.Exit(EXIT_ROWS_FAILED)


def _write_card(out_dir: Path):
    """OUT/README.md, the dataset card (core/quality/dataset_card.py), from the views as they
    are; a warning, not a failure, when it cannot be written."""
    from qtts.core.quality.dataset_card import COMMAND_WAIT_S, write_card

    try:
        card = write_card(out_dir)
    except OSError as e:
        log.warning("no dataset card written in %s: %s", out_dir, e.strerror or e)
        return None
    if card is None:
        log.warning(
            "no dataset card written in %s: another process held its results lock for %g s "
            "(it refreshes the card once its rebuild is done)",
            out_dir,
            COMMAND_WAIT_S,
        )
    return card


def _save_rules(out_dir: Path, rules) -> None:
    """Keep rules given on the command line, saved for every later rebuild; an out dir this
    process cannot write refuses them in one line (exit 2)."""
    from qtts.core.errors import UsageError
    from qtts.core.jobs.output.results import write_keep_rules

    try:
        write_keep_rules(out_dir, rules)
    except OSError as e:
        raise UsageError(
            f"cannot save the keep rules in {out_dir}: {e.strerror or e} (qtts results "
            "without rules reads an out dir it cannot write)"
        ) from None


def _warn_nothing_kept(rules, quality: dict, card) -> None:
    """Keep rules that keep no ok row: say so, and what a load of the out dir gives now, as the
    card says it for the layout (no metadata.jsonl in the files layout; a Parquet card's filter
    that keeps none; WebDataset shards that load every ok row)."""
    if rules.empty or not quality["ok"] or quality["kept"]:
        return
    gives = card.note if card is not None and card.note else "the views list no row"
    typer.echo(
        f"Warning: no ok row meets the keep rules ({rules.describe()}): {gives}; loosen the "
        "rules or give --keep-all",
        err=True,
    )


def _warn_unscored(rules, results_file: Path) -> None:
    """A rule on a column no row has a value in keeps no row: say which, and why."""
    import pyarrow.parquet as pq

    from qtts.core.jobs.output.results import SCORE_FIELDS

    names = set(pq.read_schema(results_file).names)
    for column in sorted(rules.columns()):
        if column in names:
            values = pq.read_table(results_file, columns=[column])[column]
            if values.null_count < len(values):
                continue
        hint = " (run qtts score first)" if column in SCORE_FIELDS.names else ""
        typer.echo(f"Warning: the keep rules read {column}, which no row has yet{hint}", err=True)


def _check_report_target(report: Path) -> None:
    """A page that cannot be written is a usage error, said before any rebuild: not an I/O
    error naming the page's temp file afterwards."""
    from qtts.core.errors import UsageError

    if report.is_dir():
        raise UsageError(f"--report {report} is a folder: give the page's file name (FILE.html)")
    if not report.parent.is_dir():
        raise UsageError(f"--report {report}: folder {report.parent} does not exist")
