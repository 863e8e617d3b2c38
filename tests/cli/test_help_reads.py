"""Help reads cleanly at 80 and 120 columns: paragraphs flow (no line broken early mid-sentence),
the default model is shown whole, and values are spelled as in Click (INPUT, TEXT, no <bool>)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from qtts.cli.app import EXAMPLES, app
from qtts.cli.errors import EXIT_CODES
from qtts.cli.voice_command import EXAMPLES as VOICE_EXAMPLES
from qtts.core.jobs.contract.choices import DEFAULT_MODEL

COMMANDS = ["", "synth", "batch", "info", "bench", "plan", "results", "score", "doctor", "voice"]
SUBCOMMANDS = ["voice make", "voice design", "voice info"]
SENTENCE_ENDS = (".", ":", ";", "!", "?")
KEPT_LINES = {line.strip() for block in (EXAMPLES, EXIT_CODES, VOICE_EXAMPLES)
              for line in block.splitlines()}  # fmt: skip


def render(command: str, width: int) -> str:
    args = [*command.split(), "--help"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(width), "TERMINAL_WIDTH": None})
    assert result.exit_code == 0, result.output
    return result.stdout


def early_breaks(text: str, width: int) -> list[str]:
    """Lines of one paragraph or table cell that end before they had to: the next line's first
    word would have fitted, and the line does not end a sentence or clause. Rich wraps only
    when a word does not fit, so each is a line break written into the help text."""
    found = []
    lines = text.splitlines()
    for above, below in zip(lines, lines[1:], strict=False):
        start = len(below) - len(below.lstrip(" │"))
        right = below.rfind("│")
        limit = right - 1 if right > start else width - 1  # a panel's cell, else the page
        said, more = above[start:limit].rstrip(), below[start:limit].strip()
        if not more or not said or start == 0 or above[start - 1] not in " │":
            continue  # not text that goes on in the same column
        if "  " in said or "  " in more or above.strip() in KEPT_LINES:
            continue  # cells of several columns, or a block kept line by line
        word = more.split()[0]
        if said.endswith(SENTENCE_ENDS) or word.startswith("["):  # [default: ...] goes below
            continue
        if start + len(said) + 1 + len(word) <= limit:
            found.append(f"{above.strip()!r} / {below.strip()!r}")
    return found


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("command", COMMANDS + SUBCOMMANDS)
def test_help_flows_at_the_terminal_width(command, width):
    text = render(command, width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert early_breaks(text, width) == []
    for typer_spelling in ("<str>", "<bool>", "<int", "<float", "{input}", "{manifest}"):
        assert typer_spelling not in text


def test_at_80_columns_the_default_model_is_shown_whole():
    for command, argument in (("synth", "INPUT"), ("batch", "MANIFEST")):
        text = render(command, 80)
        assert f"Usage: qtts {command} [OPTIONS] {argument}" in text
        assert DEFAULT_MODEL in text and "…" not in text
        lines = {line.strip() for line in text.splitlines()}
        assert all(line.strip() in lines for line in EXIT_CODES.splitlines())  # kept whole


def test_the_checker_finds_a_hard_break_inside_a_sentence():
    text = "\n".join(
        [
            "╭─ Options ──────────────────────────────────╮",
            "│ --model  MODEL  Local checkpoint dir or    │",
            "│                 a repo id; the default is  │",
            "│                 the 0.6B model.            │",
            "╰────────────────────────────────────────────╯",
        ]
    )
    (found,) = early_breaks(text, 46)
    assert "Local checkpoint dir or" in found and "a repo id;" in found


def panel(text: str, title: str) -> list[str]:
    """The lines inside the panel titled `title`, borders cut off."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith(f"╭─ {title} "))
    bottom = next(i for i in range(top, len(lines)) if lines[i].startswith("╰"))
    return [line[1:-1] for line in lines[top + 1 : bottom]]


def help_column(lines: list[str], option: str) -> tuple[int, int]:
    """Where an option's help starts in its panel (a character column, read off the line below
    its row, which holds only help) and how many lines the help takes."""
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == [option])
    below = lines[at + 1]
    start = len(below) - len(below.lstrip())
    taken = 1
    while at + taken < len(lines) and not lines[at + taken][:start].strip():
        taken += 1
    return start, taken


def test_qtts_help_lists_each_command_on_one_line():
    """As git, hf and uv do: a line each; the detail is in the command's own help."""
    for width in (80, 120):
        rows = panel(render("", width), "Commands")
        assert [row.split()[0] for row in rows] == COMMANDS[1:], rows


@pytest.mark.parametrize(
    "command, title, option",
    [("batch", "Failures and logging", "--on-budget"), ("bench", "Options", "--manifest")],
)
def test_an_options_panel_gives_its_help_the_width_the_names_leave(command, title, option):
    """At 80 columns typer's six columns (a `--no-` form had its own) left ~20 characters for
    the help, and `--on-budget` took 16 lines: the help now takes what the names leave."""
    lines = panel(render(command, 80), title)
    start, taken = help_column(lines, option)
    assert len(lines[0]) - start >= 36, "\n".join(lines)
    assert taken <= (10 if option == "--on-budget" else 12), "\n".join(lines)
    assert any(line.split()[:1] == ["--no-write" if command == "bench" else "--no-fail-fast"]
               for line in lines)  # fmt: skip


def test_batch_help_names_every_manifest_extension_read():
    from qtts.core.jobs.rows.sources import KINDS

    text = " ".join(render("batch", 200).split())
    missing = [e for e in KINDS if not re.search(re.escape(e) + r"\b", text)]  # .json: not .jsonl
    assert not missing, missing
