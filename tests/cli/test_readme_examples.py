"""The README's command examples use only flags the commands have (a renamed flag would leave the
Slurm, cron and Ray recipes quietly wrong), and its exit-code table is the one `--help` prints."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qtts.cli.app import app

README = Path(__file__).resolve().parents[2] / "README.md"
# The docs hold the figures and notes moved out of the README; their commands are checked too.
DOCS = sorted((README.parent / "docs").glob("*.md"))


def _commands(*docs: Path) -> list[tuple[str, list[str]]]:
    """(subcommand, flags) of every `qtts <sub> ...` line in the code blocks of the README (and of
    the given docs)."""
    out, inside = [], False
    lines = [x for p in (README, *docs) for x in p.read_text("utf-8").splitlines()]
    for line in lines:
        if line.startswith("```"):
            inside = not inside
            continue
        match = re.search(r"\bqtts (\w+)\b(.*)", line) if inside else None
        if match and not line.lstrip().startswith("#"):
            out.append((match.group(1), re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", match.group(2))))
    return out


def test_the_readme_has_the_scale_out_recipes():
    subs = [sub for sub, _ in _commands()]
    assert {"synth", "batch", "results", "plan", "bench"} <= set(subs)


@pytest.mark.parametrize(("sub", "flags"), _commands(*DOCS), ids=lambda v: str(v)[:40])
def test_every_readme_flag_exists(sub, flags):
    help_text = CliRunner().invoke(app, [sub, "--help"], terminal_width=200).output
    for flag in flags:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), (
            f"qtts {sub} has no {flag}"
        )


def _normal(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def test_the_readme_exit_codes_are_the_help_exit_codes():
    from qtts.cli.errors import EXIT_CODES

    readme = {}
    for line in README.read_text("utf-8").splitlines():
        m = re.fullmatch(r"\| (\d+) \| (.*) \|", line)
        if m:
            readme[int(m.group(1))] = _normal(m.group(2))
    helped: dict[int, str] = {}
    code = None
    for line in EXIT_CODES.splitlines()[1:]:
        m = re.match(r"\s+(\d+)\s+(.*)", line)
        if m and len(line) - len(line.lstrip()) == 2:
            code = int(m.group(1))
            helped[code] = m.group(2)
        else:
            helped[code] += " " + line.strip()
    assert readme == {k: _normal(v) for k, v in helped.items()}
    help_text = CliRunner().invoke(app, ["batch", "--help"], terminal_width=200).output
    assert "75   another qtts run holds the out dir" in help_text
