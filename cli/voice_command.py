"""`qtts voice make | design | info`: voice files, made once and cloned by every row of a job
(`qtts batch ... --voice FILE`, or a manifest's `voice` column). Thin: the work is
qtts.core.voices (imported inside each command: `qtts --help` never imports torch). stdout: one
JSON line (what the voice file holds); stderr: logs. Exit 0; 1 (a model failed to load, or the
designed sample was not spoken); 2 (usage: a bad argument, clip, checkpoint or file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from qtts.cli import options as o
from qtts.cli.errors import cli_errors
from qtts.cli.help_format import KEEP_LINES, HelpCommand, HelpGroup
from qtts.cli.logs import setup_logging
from qtts.core.jobs.contract.spec import Dtype

EXAMPLES = """\
Examples:
  qtts voice make ref.wav --text "its words" --model BASE -o narrator.voice
  qtts voice make ref.wav --model BASE -o narrator.voice   # x-vector only
  qtts voice design "a warm, low voice" --text "A sample line." \\
    --model DESIGN --base BASE -o narrator.voice
  qtts voice info narrator.voice
  qtts batch lines.parquet --model BASE --voice narrator.voice -o out/"""

voice_app = typer.Typer(
    name="voice",
    cls=HelpGroup,
    help=(
        "Voice files: a cloned voice made once (from a clip, or designed from an instruction) "
        "and used by every row that names it, with --voice or a manifest's voice column."
    ),
    epilog=KEEP_LINES + "\n" + EXAMPLES,
    no_args_is_help=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)

BaseModel = Annotated[
    str, typer.Option("--model", help="The Base checkpoint (folder or repo id) to make it with.")
]
Out = Annotated[Path, typer.Option("--out", "-o", help="The voice file to write.")]
XVectorOnly = Annotated[
    bool,
    typer.Option(
        "--x-vector-only", help="Keep the speaker embedding alone (no transcript, no codes)."
    ),
]


@voice_app.command(cls=HelpCommand)
def make(
    reference: Annotated[
        Path, typer.Argument(help="The reference clip (any format soundfile reads).")
    ],
    model: BaseModel,
    out: Out,
    text: Annotated[
        str | None,
        typer.Option(
            "--text", help="The clip's transcript: in-context mode. Without it: x-vector only."
        ),
    ] = None,
    x_vector_only: XVectorOnly = False,
    device: Annotated[
        str, typer.Option(help="cpu, cuda or cuda:N: where the two encoders run (in float32).")
    ] = "cpu",
    quiet: o.Quiet = False,
    verbose: o.Verbose = False,
) -> None:
    """Make a voice file from a reference clip with a Base checkpoint's own encoders: the speaker
    embedding, and with --text the clip's codes and transcript (in-context mode). The clip is
    not needed again."""
    setup_logging(quiet, verbose)
    with cli_errors():
        from qtts.core.voices.make import make_voice

        transcript = None if x_vector_only else text
        report = make_voice(model, reference, transcript, out, device=device)
    _report(report, "voice written")


@voice_app.command(cls=HelpCommand)
def design(
    instruction: Annotated[str, typer.Argument(help="The voice, described in words.")],
    text: Annotated[str, typer.Option("--text", help="The sample line the designed voice speaks.")],
    model: Annotated[str, typer.Option("--model", help="The VoiceDesign checkpoint.")],
    base: Annotated[str, typer.Option("--base", help="The Base checkpoint that makes the voice.")],
    out: Out,
    sample: Annotated[
        Path | None,
        typer.Option("--sample", help="Where the sample's WAV goes (default: beside -o, .wav)."),
    ] = None,
    language: Annotated[str, typer.Option(help="The sample's language, or auto.")] = "auto",
    seed: Annotated[int, typer.Option(min=0, help="The sample's seed.")] = 0,
    x_vector_only: XVectorOnly = False,
    device: o.Device = "auto",
    dtype: o.DtypeOpt = Dtype.auto,
    log_interval: o.LogInterval = 30.0,
    quiet: o.Quiet = False,
    verbose: o.Verbose = False,
) -> None:
    """Design a voice, then clone it: the VoiceDesign checkpoint speaks the sample line in the
    voice the instruction describes, and the Base checkpoint makes the voice file from that
    sample and its line. The sample's WAV is kept."""
    setup_logging(quiet, verbose)
    with cli_errors():
        from qtts.cli.commands import factories
        from qtts.cli.progress import Progress
        from qtts.core.voices.design import Design, design_voice

        asked = Design(
            instruction=instruction,
            text=text,
            model=model,
            base=base,
            out=out,
            sample=sample,
            language=language,
            seed=seed,
            device=device,
            dtype=str(dtype),
            x_vector_only=x_vector_only,
        )
        progress = Progress(quiet=quiet, log_interval=log_interval)
        open_text_model, load_synthesizer = factories()
        report = design_voice(asked, open_text_model, load_synthesizer, progress)
    _report(report, f"sample kept at {report['sample']}; voice written")


@voice_app.command(cls=HelpCommand)
def info(
    file: Annotated[Path, typer.Argument(help="A voice file.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Show what a voice file holds: its mode, transcript, reference frames, embedding width,
    the Base checkpoint it belongs to, and its digest (the ref_digest of the rows it voices)."""
    setup_logging(quiet=False, verbose=False)
    with cli_errors():
        from qtts.core.errors import UsageError
        from qtts.core.model.voice_file import VoiceFileError, read_header
        from qtts.core.voices.make import describe

        try:
            details = describe(read_header(file))
        except VoiceFileError as e:
            raise UsageError(str(e)) from None
    if as_json:
        typer.echo(json.dumps(details))
        return
    for key, value in details.items():
        typer.echo(f"{key}: {'(none)' if value is None else value}")


def _report(report: dict[str, Any], said: str) -> None:
    import logging

    logging.getLogger("qtts").info(
        "%s: %s (%s, %d frames)", said, report["voice"], report["mode"], report["frames"]
    )
    typer.echo(json.dumps(report))
