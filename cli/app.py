"""The `qtts` Typer app and its entry point `main()` (console script and `python -m qtts`).

Registers the commands of qtts.cli.commands; help carries examples and the exit-code table.
Imports no torch and no core module: `qtts --help` is instant. Chooses the process's Arrow
allocator before any command runs (use_returning_pool).
"""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from qtts.cli import (
    bench_command,
    commands,
    doctor_command,
    plan_command,
    results_command,
    score_command,
    voice_command,
)
from qtts.cli.errors import EXIT_CODES, EXIT_USAGE, usage_error
from qtts.cli.help_format import KEEP_LINES, HelpCommand, HelpGroup

EXAMPLES = """\
Examples:
  qtts synth lines.txt --speaker vivian --out-dir out/
  qtts batch manifest.parquet --model DIR --out-dir out/ --save-codes
  qtts info Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice
  qtts batch manifest.parquet -o out/ --num-shards 16 --shard-index 3
  qtts results out/
  qtts score out/ --asr-model openai/whisper-large-v3
  qtts voice make ref.wav --text "its words" --model DIR -o narrator.voice
  qtts plan manifest.parquet --model DIR --gpu l4
  qtts bench --size 1.7b --batch-sizes 1,16,64,128 --compare
  qtts doctor"""

# One paragraph: rich wraps it to the terminal (help_format.flow joins the lines).
OUTPUTS = """\
Outputs: OUT/{id}.wav (24 kHz mono, 16-bit), OUT/results.parquet (one row per input row with
an outcome: status ok|failed, error, hit_frame_budget, ...), OUT/metadata.jsonl (Hugging Face
AudioFolder). stdout: the final one-line JSON summary; stderr: logs, warnings, progress.
A rerun on the same out dir resumes: rows done with the same fingerprint (text, voice, seed,
model, sampling, format) are skipped; --dry-run says what would run; --overwrite redoes all."""


def _lines(block: str) -> str:
    """A block shown line by line (a table, examples): Click's "\\b" mark."""
    return KEEP_LINES + "\n" + block


# synth and batch: what they write, then the exit codes (a paragraph before the table also keeps
# its indent: rich dedents an epilog by the common indent of its lines after the first).
JOB_EPILOG = "\n\n".join([OUTPUTS, _lines(EXIT_CODES)])

app = typer.Typer(
    name="qtts",
    cls=HelpGroup,
    help="Batch text-to-speech with the Qwen3-TTS 12 Hz models.",
    epilog="\n\n".join([_lines(EXAMPLES), OUTPUTS, _lines(EXIT_CODES)]),
    pretty_exceptions_enable=False,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        from qtts import __version__
        from qtts.core.doctor.version_lines import version_lines

        typer.echo("\n".join(version_lines(__version__)))
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


# `qtts --help` lists each command on one line, as git, hf and uv do; `qtts CMD --help` says
# the rest (the command's docstring). Each fits the 80-column panel beside the command's name.
SHORT_HELP = {
    "synth": "Speak each line of a text file into OUT/.",
    "batch": "Speak each row of a manifest (Parquet, JSONL, CSV) into OUT/.",
    "info": "Show a checkpoint's voices, languages and sampling defaults.",
    "bench": "Measure throughput on random weights (no download).",
    "plan": "Plan a job's GPU memory and duration, without a GPU.",
    "results": "Count an out dir's rows, summarize its quality, set keep rules.",
    "score": "Score audio: DNSMOS, an ASR round trip, speaker similarity.",
    "doctor": "Check this install on its device.",
    "voice": "Make, design or show a voice file that rows clone.",
}
_command = functools.partial(app.command, cls=HelpCommand)
for _run, _epilog in (
    (commands.synth, JOB_EPILOG),
    (commands.batch, JOB_EPILOG),
    (commands.info, None),
    (bench_command.bench, None),
    (plan_command.plan, None),
    (results_command.results, None),
    (score_command.score, None),
    (doctor_command.doctor, None),
):
    _command(epilog=_epilog, short_help=SHORT_HELP[_run.__name__])(_run)
app.add_typer(voice_command.voice_app, name="voice", short_help=SHORT_HELP["voice"])


def main() -> None:
    """The console script: a command line Typer refuses while parsing (a value out of range, an
    unknown option) is one `Error:` line naming the option, exit 2, not a usage block."""
    use_returning_pool()  # before any table is made: every one then uses the same pool
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


def use_returning_pool() -> str:
    """Make jemalloc the process's Arrow pool, one that hands freed memory back (unless the
    environment's ARROW_DEFAULT_MEMORY_POOL chose one, or this pyarrow lacks it); its name.
    A resume scan at ten million rows builds and drops several large temporaries (hash tables,
    taken columns); pyarrow's default pool here (mimalloc) keeps much of what they freed, so the
    process's peak grows past what it holds at any moment (docs/scale.md: a finished 10M-row
    rerun peaks at 6.13 GB with mimalloc, 5.56 GB with jemalloc, the same wall time)."""
    import os

    import pyarrow as pa

    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except (NotImplementedError, pa.ArrowException):
            pass
    return pa.default_memory_pool().backend_name
