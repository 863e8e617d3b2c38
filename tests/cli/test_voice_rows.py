"""Jobs that clone voice files (fake Base model, in process): `--voice` and the `voice` column,
what results.parquet says of them, a changed voice file redoing exactly its rows, a voice made
for another model refused in one line (exit 2 for the flag) or failing its row alone (the column),
and `qtts score` grouping the rows of one voice file under one centroid. Plumbing: the fake's
audio is a sine whatever the voice."""

from __future__ import annotations

import subprocess

import fakes
import pytest
from cli_calls import qtts, results, summary
from fakes import fake_env, qtts_cmd

pytestmark = pytest.mark.usefixtures("fake_model")
ROWS = [{"id": f"v{i}", "text": f"line number {i}"} for i in range(3)]


def test_the_voice_flag_voices_every_row_and_a_changed_voice_redoes_them(tmp_path, write_manifest):
    voice = fakes.fake_voice(tmp_path / "narrator.voice", transcript="its words")
    m, out = write_manifest(ROWS), tmp_path / "out"
    r = qtts("batch", m, "-o", out, "--model", "fake-base", "--voice", voice)
    assert r.exit_code == 0 and summary(r)["ok"] == 3, r.stderr
    row = results(out)["v0"]
    assert (row["voice"], row["ref_audio"], row["ref_text"]) == (str(voice), None, "its words")
    r = qtts("batch", m, "-o", out, "--model", "fake-base", "--voice", voice)
    assert summary(r)["skipped"] == 3
    fakes.fake_voice(voice, transcript="other words")  # the same file name, another voice
    r = qtts("batch", m, "-o", out, "--model", "fake-base", "--voice", voice)
    assert summary(r)["ok"] == 3, r.stderr
    assert "ref_audio or voice file content (3)" in r.stderr and "ref_text (3)" in r.stderr


def test_a_voice_flag_for_another_model_is_one_line_and_nothing_is_made(tmp_path, write_manifest):
    voice = fakes.fake_voice(tmp_path / "narrator.voice", model="fake-base-other")
    out = tmp_path / "out"
    r = qtts("batch", write_manifest(ROWS), "-o", out, "--model", "fake-base", "--voice", voice)
    assert r.exit_code == 2 and not out.exists()
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("Error: --voice: voice ") and "another model" in line


def test_a_voice_column_for_another_model_fails_its_row_alone(tmp_path, write_manifest):
    fakes.fake_voice(tmp_path / "a.voice")
    fakes.fake_voice(tmp_path / "b.voice", model="fake-base-other")
    rows = [{**r, "voice": "b.voice" if i == 1 else "a.voice"} for i, r in enumerate(ROWS)]
    out = tmp_path / "out"
    r = qtts("batch", write_manifest(rows), "-o", out, "--model", "fake-base")
    assert r.exit_code == 3 and (summary(r)["ok"], summary(r)["failed"]) == (2, 1)
    got = results(out)
    assert "was made with the Base checkpoint fake-base-other" in got["v1"]["error"]
    assert got["v0"]["voice"] == str(tmp_path / "a.voice")  # relative to the manifest's folder


def test_rows_of_one_voice_file_share_a_centroid(tmp_path, write_manifest):
    """qtts score groups rows by their voice file (its digest, the rows' ref_digest): a voice's
    rows are held to their own mean, a voice of one row is its own (1.0); a voice row has no
    reference clip to hold speaker_sim to."""
    fakes.fake_voice(tmp_path / "a.voice")
    fakes.fake_voice(tmp_path / "b.voice", transcript=None)
    rows = [{**r, "voice": "b.voice" if i == 2 else "a.voice"} for i, r in enumerate(ROWS)]
    out = tmp_path / "out"
    assert qtts("batch", write_manifest(rows), "-o", out, "--model", "fake-base").exit_code == 0
    p = subprocess.run(qtts_cmd("score", out, "--no-dnsmos"), capture_output=True, text=True,
                       env=fake_env(), timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    got = results(out)
    centroid = [got[f"v{i}"]["speaker_sim_centroid"] for i in range(3)]
    assert centroid[2] == pytest.approx(1.0)  # alone with its voice: its own mean
    assert centroid[0] == pytest.approx(centroid[1]) and centroid[0] < 1.0
    assert all(got[f"v{i}"]["speaker_sim"] is None for i in range(3))
