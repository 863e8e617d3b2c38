"""`qtts plan` on a file with a long paragraph plans what the job runs: the segment requests its
split settings make, in the length groups of `--dry-run`'s memory plan; the dry run's frames stay
within the budget each segment gets; a small model's default segment limit is fitted to it, a
limit the user gave that it cannot speak is refused (tiny random checkpoints: plumbing only)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from qtts.cli.app import app

LONG = " ".join(f"Paragraph sentence {i} talks about the weather, the hills and the sea."
                for i in range(8))  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", seed=2)


@pytest.fixture(scope="module")
def small_checkpoint(checkpoint, tmp_path_factory):
    """The tiny checkpoint with max_new_tokens 24 in its generation config: 23 frames, so
    segments of at most 15 tokens (1.5 frames each)."""
    import shutil

    out = tmp_path_factory.mktemp("small") / "tiny24"
    shutil.copytree(checkpoint, out)
    path = out / "generation_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "max_new_tokens": 24}))
    return out


@pytest.fixture
def lines(tmp_path, monkeypatch):
    monkeypatch.delenv("QTTS_FAKE_SYNTH", raising=False)  # the real text side (no weights load)
    path = tmp_path / "long.txt"
    path.write_text(f"A short line.\n{LONG}\n")
    return path


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _last_json(result) -> dict:
    return json.loads(result.stdout.strip().splitlines()[-1])


def _plan(path, model, *extra) -> dict:
    r = _run("plan", path, "--model", model, "--gpu", "l4", "--speaker", "vivian", *extra)
    assert r.exit_code == 0, r.output
    return _last_json(r)


def _dry_run(path, model, out, *extra) -> dict:
    r = _run("synth", path, "-m", model, "-o", out, "--device", "cpu", "--speaker", "vivian",
             "--dry-run", *extra)  # fmt: skip
    assert r.exit_code == 0, r.output
    return _last_json(r)


def _groups(memory_plan: str) -> list[tuple[int, int]]:
    """(rows, KV positions) per length group of the dry run's one-line memory plan."""
    (listed,) = re.findall(r"\[rows x kv_len @ slots: ([^\]]*)\]", memory_plan)
    return [(int(a), int(b)) for a, b in re.findall(r"(\d+)x(\d+)@\d+", listed)]


@pytest.mark.parametrize(
    "split, split_rows",
    [([], 1), (["--split", "none"], 0), (["--max-segment-tokens", "30"], 1)],
)
def test_plan_runs_the_segment_requests_of_the_job(checkpoint, lines, tmp_path, split, split_rows):
    plan = _plan(lines, checkpoint, *split)
    dry = _dry_run(lines, checkpoint, tmp_path / "out", *split)
    assert [(g["rows"], g["kv_len"]) for g in plan["groups"]] == _groups(dry["memory_plan"])
    job = plan["job"]
    assert job["rows"] == dry["to_synthesize"] == 2
    assert job["split_rows"] == dry["split_rows"] == split_rows
    requests = 2 - split_rows + dry["segments"]
    assert job["requests"] == requests == sum(g["rows"] for g in plan["groups"])
    if split_rows:  # the paragraph was planned whole before: one slot of its full length
        assert requests > 4 and max(g["kv_len"] for g in plan["groups"]) < 1000


def test_split_rows_are_estimated_within_their_segments_budgets(checkpoint, lines, tmp_path):
    """--max-new-tokens 6: each segment may take 6 steps, so the paragraph's estimate is at most
    6 per request (it was 4 frames per token of the whole text, over a thousand)."""
    dry = _dry_run(lines, checkpoint, tmp_path / "out", "--max-new-tokens", 6)
    requests = 1 + dry["segments"]
    assert dry["split_rows"] == 1 and requests > 4
    assert 0 < dry["est_frames"] <= 6 * requests
    plan = _plan(lines, checkpoint, "--max-new-tokens", 6)
    assert plan["job"]["audio_hours"] * 3600 == pytest.approx(dry["est_frames"] * 0.08)
    unbounded = _dry_run(lines, checkpoint, tmp_path / "out", "--split", "none")
    assert unbounded["est_frames"] > 10 * dry["est_frames"]


def test_a_small_models_default_segment_limit_is_fitted_and_a_given_one_refused(
    small_checkpoint, lines, tmp_path
):
    r = _run("synth", lines, "-m", small_checkpoint, "-o", tmp_path / "out", "--device", "cpu",
             "--speaker", "vivian", "--dry-run")  # fmt: skip
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.stderr.splitlines() if "the default 50 is more" in x]
    assert "--max-segment-tokens 15:" in line and "(max_new_tokens 24)" in line
    dry = _last_json(r)
    assert dry["split_rows"] == 1 and dry["segments"] > 8
    plan = _plan(lines, small_checkpoint)
    assert plan["job"]["requests"] == 1 + dry["segments"]
    for command in (["plan", lines, "--model", small_checkpoint],
                    ["synth", lines, "-m", small_checkpoint, "-o", tmp_path / "o2", "--dry-run",
                     "--device", "cpu", "--speaker", "vivian"]):  # fmt: skip
        r = _run(*command, "--max-segment-tokens", 50)
        errors = [x for x in r.stderr.splitlines() if x.startswith("Error:")]
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert len(errors) == 1 and "--max-segment-tokens 50 is more than this model" in errors[0]
