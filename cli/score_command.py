"""`qtts score PATH`: model-based scores (DNSMOS P.835, an ASR round trip, speaker similarity) of a
qtts out dir or any AudioFolder, as a separate, resumable pass (qtts.core.quality). stdout: one
JSON line; stderr: logs, each failed file's reason, the progress bar. Exit 0, 2 (usage: bad
PATH, no metadata, the quality extra missing), 3 (some files failed), 75 (another pass holds
PATH)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer

from qtts.cli import options as o
from qtts.cli.errors import EXIT_ROWS_FAILED, cli_errors
from qtts.cli.logs import setup_logging

DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def score(
    path: Annotated[
        Path, typer.Argument(help="A qtts out dir, or a folder with audio and metadata.jsonl.")
    ],
    asr_model: Annotated[
        str | None,
        typer.Option(
            "--asr-model",
            help="A Whisper-class checkpoint (directory or Hugging Face repo id): adds asr_text, "
            "cer and wer against each row's text.",
        ),
    ] = None,
    dnsmos: Annotated[
        bool, typer.Option(help="DNSMOS P.835: dnsmos_sig, dnsmos_bak, dnsmos_ovrl.")
    ] = True,
    speaker: Annotated[
        bool,
        typer.Option(
            help="Speaker similarity: speaker_sim (against the row's reference clip) and "
            "speaker_sim_centroid (against its voice's mean)."
        ),
    ] = True,
    speaker_model: Annotated[
        str,
        typer.Option(
            "--speaker-model",
            help="resemblyzer (GE2E, weights in its wheel), an x-vector checkpoint such as "
            "microsoft/wavlm-base-plus-sv (folder or repo id), or a Qwen3-TTS Base checkpoint "
            "(its ECAPA-TDNN speaker encoder).",
        ),
    ] = "resemblyzer",
    device: Annotated[
        str, typer.Option(help="auto, cpu, cuda or cuda:N (auto: the GPU when there is one).")
    ] = "auto",
    batch_size: Annotated[int, typer.Option(min=1, help="30 s windows per ASR call.")] = 16,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Score every file again (default: resume).")
    ] = False,
    log_interval: o.LogInterval = 30.0,
    quiet: o.Quiet = False,
    verbose: o.Verbose = False,
) -> None:
    r"""Score every audio file of PATH into PATH/scores.parquet; in a qtts out dir,
    results.parquet and metadata.jsonl carry the scores too. Files scored before by the same
    scorers are skipped. Needs `pip install "qtts\[quality]"`. stdout: one JSON line (rows,
    scored, skipped, failed, stats, status, exit_code). Exit 0, 2 (usage), 3 (some files
    failed), 75 (busy), 130/143 (Ctrl-C, SIGTERM: the scores so far are kept)."""
    setup_logging(quiet, verbose)
    with cli_errors():
        if not DEVICE.match(device):
            raise typer.BadParameter(f"--device {device!r}: use auto, cpu, cuda or cuda:N")
        from qtts.cli.progress import Progress
        from qtts.core.quality.score_pass import ScoreOptions, score_path

        options = ScoreOptions(
            dnsmos=dnsmos,
            asr_model=asr_model,
            speaker_model=speaker_model if speaker else None,
            device=device,
            batch_size=batch_size,
            overwrite=overwrite,
        )
        progress = Progress(quiet=quiet, log_interval=log_interval)
        summary = score_path(path, options, progress)
    if summary["exit_code"] is None:
        summary["exit_code"] = EXIT_ROWS_FAILED if summary["failed"] else 0
    typer.echo(json.dumps(summary))
    if summary["exit_code"]:
        raise typer.Exit(summary["exit_code"])
