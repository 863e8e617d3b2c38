"""`qtts plan` finds a manifest's columns as `qtts batch` does, through the console script: with
--text-column sentence --id-column utt it plans the rows the batch dry run would synthesize, and
exactly what it plans for the same manifest with the fields' own names; a wrong or missing name
is the same one-line refusal as batch's, and a column flag on text lines is refused."""

from __future__ import annotations

import json
import subprocess

import pytest
from fakes import fake_env, qtts_cmd

LONG = " ".join(f"Sentence {i} of a paragraph long enough to be split." for i in range(12))
ROWS = [("a", "Hello there."), ("b", LONG), ("c", "Third."), ("d", "   "), ("e", "Fifth one.")]
PLAN = ("--size", "0.6b", "--gpu", "l4")


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(qtts_cmd(*args), capture_output=True, text=True, env=fake_env(),
                          timeout=180)  # fmt: skip


def last_json(proc) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def one_error(proc) -> str:
    errors = [x for x in proc.stderr.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return errors[0]


@pytest.fixture
def manifests(tmp_path):
    """The same rows as a CSV with columns utt,sentence and as JSON Lines with id,text."""
    renamed, plain = tmp_path / "renamed.csv", tmp_path / "plain.jsonl"
    renamed.write_text("utt,sentence\n" + "".join(f'{i},"{t}"\n' for i, t in ROWS))
    plain.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in ROWS))
    return renamed, plain


def test_plan_reads_the_columns_batch_reads(manifests, tmp_path):
    renamed, plain = manifests
    names = ("--text-column", "sentence", "--id-column", "utt")
    p = run("plan", renamed, *names, *PLAN)
    assert p.returncode == 0, p.stderr
    job = last_json(p)["job"]
    assert last_json(p) == last_json(run("plan", plain, *PLAN))  # the same plan, byte for byte
    assert job["rows"] == 4 and job["split_rows"] == 1, job  # the blank row is not planned
    dry = run("batch", renamed, *names, "-o", tmp_path / "out", "--speaker", "ryan", "--dry-run")
    assert dry.returncode == 0, dry.stderr  # the blank row fails validation: counted, not fatal
    assert last_json(dry)["to_synthesize"] + last_json(dry)["failed"] == len(ROWS)
    assert last_json(dry)["to_synthesize"] == job["rows"]


def test_a_wrong_column_name_is_refused_as_batch_refuses_it(manifests, tmp_path):
    renamed, _ = manifests
    p = run("plan", renamed, "--text-column", "sentense", "--id-column", "utt", *PLAN)
    b = run("batch", renamed, "--text-column", "sentense", "--id-column", "utt", "-o",
            tmp_path / "out", "--speaker", "ryan", "--dry-run")  # fmt: skip
    assert p.returncode == b.returncode == 2
    assert one_error(p) == one_error(b) and "'sentense' (--text-column sentense)" in one_error(p)
    p = run("plan", renamed, *PLAN)  # no flags: the fields' own names are missing
    assert p.returncode == 2 and "missing required column(s) id, text" in one_error(p)
    p = run("plan", renamed, "--column", "timbre=spk", *PLAN)
    assert p.returncode == 2 and "--column 'timbre=spk'" in one_error(p)


def test_a_column_flag_needs_a_manifest(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("One line.\nAnother.\n")
    p = run("plan", lines, "--text-column", "sentence", *PLAN)
    assert p.returncode == 2 and "read as text lines" in one_error(p)
    p = run("plan", "--text-column", "sentence", *PLAN)
    assert p.returncode == 2 and "--text-column sentence needs INPUT" in one_error(p)
