"""The README's command examples use only flags the commands have (a renamed flag would leave the
Slurm, cron and Ray recipes quietly wrong), its exit-code table is the one `--help` prints, and
its command 1 runs as written: the tiny checkpoint's rows end by EOS, so neither `qtts synth` nor
`qtts batch` on it needs --max-new-tokens."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qtts.cli.app import app

README = Path(__file__).resolve().parents[2] / "README.md"
# The docs hold the figures and notes moved out of the README; their commands are checked too.
DOCS = sorted((README.parent / "docs").glob("*.md"))


def _commands(*docs: Path) -> list[tuple[str, list[str]]]:
    """(subcommand, flags) of every `qtts <sub> ...` line in the code blocks of the README (and of
    the given docs); a group's command is its two words (`voice make`)."""
    out, inside = [], False
    lines = [x for p in (README, *docs) for x in p.read_text("utf-8").splitlines()]
    for line in lines:
        if line.startswith("```"):
            inside = not inside
            continue
        match = re.search(r"\bqtts (voice \w+|\w+)\b(.*)", line) if inside else None
        if match and not line.lstrip().startswith("#"):
            out.append((match.group(1), re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", match.group(2))))
    return out


def test_the_readme_has_the_scale_out_recipes():
    subs = [sub for sub, _ in _commands()]
    assert {"synth", "batch", "results", "plan", "bench"} <= set(subs)


@pytest.mark.parametrize(("sub", "flags"), _commands(*DOCS), ids=lambda v: str(v)[:40])
def test_every_readme_flag_exists(sub, flags):
    help_text = CliRunner().invoke(app, [*sub.split(), "--help"], terminal_width=200).output
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


REPO = README.parent
# What the README says command 1 leaves: a file per non-empty line, and each one's frames.
COMMAND_1_FRAMES = {"000001": 38, "000002": 38, "000004": 51, "000005": 58}
LINE_5_SEGMENTS = [18, 40]


def _command_1() -> list[list[str]]:
    """The README's command 1 as argv lists, without its pip install."""
    (line,) = [x for x in README.read_text("utf-8").splitlines() if "make_tiny_checkpoint" in x
               and x.startswith("pip install")]  # fmt: skip
    return [shlex.split(part) for part in line.split(" && ")[1:]]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """argv as the README's reader runs it in a checkout (python, qtts), from `cwd`."""
    program = {"python": [sys.executable], "qtts": [sys.executable, "-m", "qtts"]}[argv[0]]
    args = [str(REPO / a) if a.startswith("examples/") else a for a in argv[1:]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("QTTS_")}
    env["QTTS_CPU_BF16"] = "0"  # the figures the README quotes are fp32's (conftest.py)
    return subprocess.run([*program, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip


def _records(out: Path) -> dict[str, dict]:
    import pyarrow.parquet as pq

    return {r["id"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}


@pytest.fixture(scope="module")
def command_1(tmp_path_factory):
    """The README's command 1, run in a fresh folder: (that folder, qtts synth's process)."""
    make, synth = _command_1()
    assert "--max-new-tokens" not in synth
    here = tmp_path_factory.mktemp("readme")
    made = _run(make, here)
    assert made.returncode == 0, made.stderr
    return here, _run(synth, here)


@pytest.mark.slow
def test_command_1_ends_every_row_by_eos_where_the_readme_says(command_1):
    here, proc = command_1
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["ok"] == 4 and summary["hit_frame_budget"] == 0
    out = here / "out"
    assert sorted(p.name for p in out.glob("*.wav")) == [f"{i}.wav" for i in COMMAND_1_FRAMES]
    records = _records(out)
    assert {i: r["num_frames"] for i, r in records.items()} == COMMAND_1_FRAMES
    assert records["000005"]["segment_frames"] == LINE_5_SEGMENTS
    assert all(not r["hit_frame_budget"] and r["attempts"] == 1 for r in records.values())
    said = " ".join(README.read_text("utf-8").split())
    assert "(38, 38, 51 and 58 frames here)" in said and "segments of 18 and 40 frames" in said
    assert "`out/000001.wav`" in said and "`out/results.parquet`" in said


@pytest.mark.slow
def test_batch_on_the_tiny_checkpoint_ends_rows_by_eos_at_their_own_lengths(command_1, tmp_path):
    """The issue's row: "Hi." under the automatic budget and --on-budget retry (qtts batch's
    default there) used to run three budgets and fail; now every row stops by EOS at its first
    try, longer text making longer audio."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    here, _ = command_1
    texts = ["Hi.", "Hello there, how are you?", "A longer sentence, spoken slowly and clearly."]
    manifest = tmp_path / "m.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": f"r{i}", "text": t} for i, t in enumerate(texts)]),
                   manifest)  # fmt: skip
    proc = _run(["qtts", "batch", str(manifest), "--model", str(here / "tiny-model"),
                 "--speaker", "vivian", "-o", str(tmp_path / "out")], here)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    records = _records(tmp_path / "out")
    assert all(r["status"] == "ok" and not r["hit_frame_budget"] for r in records.values())
    assert {r["attempts"] for r in records.values()} == {1}
    frames = [records[f"r{i}"]["num_frames"] for i in range(len(texts))]
    assert frames == sorted(set(frames)), frames  # distinct, growing with the text
