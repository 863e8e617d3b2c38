"""Voice files on tiny random checkpoints (plumbing, not voice quality: the weights are random):
rows cloning a voice file get exactly the codes of rows naming its clip (in-context and x-vector),
another clip's voice gives other codes, a voice of another Base checkpoint is refused in one line,
and the README's `qtts voice` workflow runs as written (a tiny VoiceDesign checkpoint speaks the
designed sample)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
import torch
from cli_calls import qtts
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.tiny.checkpoint import make_tiny_checkpoint

README = Path(__file__).resolve().parents[2] / "README.md"
TRANSCRIPT = "its transcript"
LINES = ["Hello there.", "A second row, a little longer."]
# Rows of the no-EOS checkpoint run to their budget: max_new_tokens - 1 frames each.
JOB = ["--device", "cpu", "--dtype", "float32", "--max-new-tokens", "8", "--save-codes", "-q"]


def clip(path: Path, seconds: float = 3.0, pitch: float = 180.0) -> Path:
    """A voiced-sounding clip: a tone whose loudness moves like syllables."""
    t = np.arange(int(seconds * 24000)) / 24000
    wav = 0.3 * np.sin(2 * np.pi * pitch * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    sf.write(str(path), wav.astype(np.float32), 24000)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Base checkpoints (seed 1 with no EOS, for fixed lengths; seed 0 whose rows end by EOS)
    and a VoiceDesign one, as examples/make_tiny_checkpoint.py makes them by default."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny")
    return {
        "fixed": make_tiny_checkpoint(root / "base1", model_type="base", seed=1),
        "base": make_tiny_checkpoint(root / "base", model_type="base", stop_by_text=True),
        "design": make_tiny_checkpoint(root / "vd", model_type="voice_design", stop_by_text=True),
    }


def lines(tmp_path: Path) -> Path:
    path = tmp_path / "lines.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": LINES}), path)
    return path


def codes(out: Path) -> dict[str, np.ndarray]:
    return {i: np.load(out / f"{i}.codes.npy") for i in ("a", "b")}


@pytest.mark.parametrize("mode", ["in_context", "x_vector"])
def test_a_voice_file_gives_the_codes_of_its_clip(tiny, tmp_path, mode):
    ref, rows, model = clip(tmp_path / "ref.wav"), lines(tmp_path), tiny["fixed"]
    text = ["--text", TRANSCRIPT] if mode == "in_context" else []
    r = qtts("voice", "make", ref, *text, "--model", model, "-o", tmp_path / "n.voice", "-q")
    assert r.exit_code == 0 and f'"mode": "{mode}"' in r.stdout, r.output
    direct = ["--ref-text", TRANSCRIPT] if mode == "in_context" else ["--x-vector-only"]
    runs = {
        "clip": ["--ref-audio", ref, *direct],
        "voice": ["--voice", tmp_path / "n.voice"],
        "other": ["--voice", tmp_path / "other.voice"],
    }
    other = clip(tmp_path / "other.wav", pitch=330.0)
    r = qtts("voice", "make", other, *text, "--model", model, "-o", tmp_path / "other.voice")
    assert r.exit_code == 0, r.output
    got = {}
    for name, voice in runs.items():
        r = qtts("batch", rows, "--model", model, *voice, *JOB, "-o", tmp_path / name)
        assert r.exit_code == 0, r.output
        got[name] = codes(tmp_path / name)
        ref.unlink(missing_ok=True)  # the voice files need their clips no more
    for i in ("a", "b"):
        assert got["clip"][i].shape == (7, 16)
        np.testing.assert_array_equal(got["voice"][i], got["clip"][i])  # token for token
    # The check can fail: another clip's voice draws other codes from the same seeds.
    assert any((got["other"][i] != got["clip"][i]).any() for i in ("a", "b"))


def test_an_in_context_voice_under_x_vector_only_is_its_embedding(tiny, tmp_path):
    ref, rows, model = clip(tmp_path / "ref.wav"), lines(tmp_path), tiny["fixed"]
    voice = tmp_path / "n.voice"
    assert (
        qtts("voice", "make", ref, "--text", TRANSCRIPT, "--model", model, "-o", voice).exit_code
        == 0
    )
    for name, given in (("clip", ["--ref-audio", ref]), ("voice", ["--voice", voice])):
        r = qtts(
            "batch", rows, "--model", model, *given, "--x-vector-only", *JOB, "-o", tmp_path / name
        )
        assert r.exit_code == 0, r.output
    clip_codes, voice_codes = codes(tmp_path / "clip"), codes(tmp_path / "voice")
    for i in ("a", "b"):
        np.testing.assert_array_equal(voice_codes[i], clip_codes[i], err_msg=f"row {i}")


def test_a_voice_of_another_base_checkpoint_is_refused_in_one_line(tiny, tmp_path):
    voice = tmp_path / "n.voice"
    r = qtts("voice", "make", clip(tmp_path / "ref.wav"), "--model", tiny["base"], "-o", voice)
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    r = qtts("batch", lines(tmp_path), "--model", tiny["fixed"], "--voice", voice, *JOB, "-o", out)
    assert r.exit_code == 2 and not out.exists()
    (line,) = r.stderr.strip().splitlines()
    assert re.match(
        r"Error: --voice: voice .* was made with the Base checkpoint .*another model", line
    )
    r = qtts("voice", "make", clip(tmp_path / "ref.wav"), "--model", tiny["design"], "-o", voice)
    assert r.exit_code == 2 and "voice_design checkpoint" in r.stderr


def readme_workflow() -> list[str]:
    """The README's `qtts voice` block: each command, continuation lines joined."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text("utf-8"), re.S)
    (block,) = [b for b in blocks if "qtts voice design" in b]
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def test_the_readme_workflow_runs_as_written(tiny, tmp_path, monkeypatch):
    """Every command of the README's block, its checkpoints the tiny ones; rows end by EOS."""
    monkeypatch.chdir(tmp_path)
    clip(tmp_path / "ref.wav")
    lines(tmp_path)
    given = {"BASE_DIR": str(tiny["base"]), "VOICEDESIGN_DIR": str(tiny["design"])}
    said = {}
    for command in readme_workflow():
        args = [given.get(a, a) for a in shlex.split(command, comments=True)]
        assert args[0] == "qtts"
        r = CliRunner().invoke(app, args[1:])
        assert r.exit_code == 0, f"{command}\n{r.output}"
        said[" ".join(args[1:3])] = r.stdout
    assert (
        "mode: in_context" in said["voice info"]
        and f"transcript: {TRANSCRIPT}" in said["voice info"]
    )
    assert (tmp_path / "designed.wav").is_file()  # the designed sample, kept beside its voice
    assert '"made_from": "designed.wav"' in said["voice design"]
    assert '"transcript": "A sample line, spoken slowly."' in said["voice design"]
    for out, voice in (("out", "narrator.voice"), ("out-designed", "designed.voice")):
        table = pq.read_table(tmp_path / out / "results.parquet").to_pylist()
        assert [r["status"] for r in table] == ["ok", "ok"]
        assert {r["voice"] for r in table} == {str(tmp_path / voice)}
        assert not any(r["hit_frame_budget"] for r in table)  # ended by EOS, as the README says


def test_design_keeps_its_sample_where_asked_and_refuses_wrong_checkpoints(tiny, tmp_path):
    voice, sample = tmp_path / "d.voice", tmp_path / "samples" / "d-sample.wav"
    sample.parent.mkdir()
    design = ["voice", "design", "a bright, quick voice", "--text", "One sample line."]
    r = qtts(*design, "--model", tiny["design"], "--base", tiny["base"], "-o", voice,
             "--sample", sample, "--x-vector-only", "--device", "cpu", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert '"mode": "x_vector"' in r.stdout and sample.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.voice", "samples"]  # no scratch left
    for model, base, says in ((tiny["base"], tiny["base"], "--model"),
                              (tiny["design"], tiny["design"], "--base")):  # fmt: skip
        r = qtts(*design, "--model", model, "--base", base, "-o", tmp_path / "e.voice")
        assert r.exit_code == 2 and r.stderr.startswith(f"Error: {says} "), r.output
        assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "e.voice").exists() and not (tmp_path / "e.wav").exists()
