"""The `qtts` Typer app and its entry point `main()` (console script and `python -m qtts`).

Registers the commands of qtts.cli.commands; help carries examples and the exit-code table.
Imports no torch and no core module: `qtts --help` is instant.
"""

from __future__ import annotations

from typing import Annotated

import typer

from qtts.cli import (
    bench_command,
    commands,
    doctor_command,
    plan_command,
    results_command,
    score_command,
)
from qtts.cli.errors import EXIT_CODES, EXIT_USAGE, usage_error

EXAMPLES = """\
Examples:
  qtts synth lines.txt --speaker vivian --out-dir out/
  qtts batch manifest.parquet --model DIR --out-dir out/ --save-codes
  qtts info Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice
  qtts batch manifest.parquet -o out/ --num-shards 16 --shard-index 3
  qtts results out/
  qtts score out/ --asr-model openai/whisper-large-v3
  qtts plan manifest.parquet --model DIR --gpu l4
  qtts bench --size 1.7b --batch-sizes 1,16,64,128 --compare
  qtts doctor"""

OUTPUTS = """\
Outputs: OUT/{id}.wav (24 kHz mono, 16-bit), OUT/results.parquet (one row per input row with
an outcome: status ok|failed, error, hit_frame_budget, ...), OUT/metadata.jsonl (Hugging Face
AudioFolder). stdout: the final one-line JSON summary; stderr: logs, warnings, progress.
A rerun on the same out dir resumes: rows done with the same fingerprint (text, voice, seed,
model, sampling, format) are skipped; --dry-run says what would run; --overwrite redoes all."""


def _epilog(*blocks: str) -> str:
    # "\b" keeps Click from re-wrapping a block; blank lines separate blocks.
    return "\n\n".join("\b\n" + b for b in blocks)


app = typer.Typer(
    name="qtts",
    help="Batch text-to-speech with the Qwen3-TTS 12 Hz models.",
    epilog=_epilog(EXAMPLES, OUTPUTS, EXIT_CODES),
    pretty_exceptions_enable=False,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        from qtts.cli.version import version_lines

        typer.echo("\n".join(version_lines()))
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            help="Print qtts's version, torch, CUDA, Triton and the device found, and exit.",
        ),
    ] = False,
) -> None:
    """Batch text-to-speech with the Qwen3-TTS 12 Hz models."""


app.command(epilog=_epilog(EXIT_CODES))(commands.synth)
app.command(epilog=_epilog(EXIT_CODES))(commands.batch)
app.command()(commands.info)
app.command()(bench_command.bench)
app.command()(plan_command.plan)
app.command()(results_command.results)
app.command()(score_command.score)
app.command()(doctor_command.doctor)


def main() -> None:
    """The console script: a command line Typer refuses while parsing (a value out of range, an
    unknown option) is one `Error:` line naming the option, exit 2, not a usage block."""
    try:
        code = app(standalone_mode=False)
    except typer.Exit as e:
        code = e.exit_code
    except typer.Abort:  # Ctrl-C while Typer was still reading the command line
        typer.echo("Error: interrupted", err=True)
        raise SystemExit(130) from None
    except Exception as exc:
        if getattr(exc, "exit_code", None) != EXIT_USAGE or not hasattr(exc, "format_message"):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `qtts`: the help, as Click shows it
            exc.show()
            raise SystemExit(EXIT_USAGE) from None
        raise SystemExit(usage_error(exc).exit_code) from None
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
