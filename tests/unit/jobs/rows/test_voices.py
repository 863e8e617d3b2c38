"""Rows that clone a voice file: the voice stands in for the reference (its digest, its
transcript), relative paths resolve as ref_audio's do, a row naming a voice and a reference of
its own fails alone, and so does a voice the model cannot use; --voice fills only rows without a
reference of their own, and refuses to go with --ref-audio/--ref-text."""

from __future__ import annotations

from pathlib import Path

import fakes
import pyarrow as pa
import pytest

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.spec import JobSpec, OutputOptions, RowDefaults, VoiceOptions
from qtts.core.jobs.execution.run import apply_reference_defaults
from qtts.core.jobs.rows.manifest import ROW_SCHEMA
from qtts.core.jobs.rows.validation import prepare_rows
from qtts.core.jobs.rows.voices import WITH_REF_AUDIO, WITH_REF_TEXT, check_voice_flag
from qtts.core.jobs.state.ref_digests import RefDigests
from qtts.core.model.voice_file import file_digest


def _rows(rows: list[dict]) -> pa.Table:
    full = [{"row": i + 1, "id": f"r{i + 1}", "text": "hello there", **r}
            for i, r in enumerate(rows)]  # fmt: skip
    return pa.Table.from_pylist(full, schema=ROW_SCHEMA)


def _prepare(tmp_path, rows, model="fake-base", **kw):
    prepared = prepare_rows(_rows(rows), fakes.FakeTextModel(model), RowDefaults(),
                            ref_dir=tmp_path, refs=RefDigests(tmp_path), **kw)  # fmt: skip
    return {r["id"]: r for r in prepared.rows.to_pylist()}


def test_a_voice_row_takes_the_voice_files_digest_and_transcript(tmp_path):
    fakes.fake_voice(tmp_path / "n.voice", transcript="the clip's words")
    (tmp_path / "ref.wav").write_bytes(b"RIFF clip")
    got = _prepare(tmp_path, [{"voice": "n.voice"}, {"ref_audio": "ref.wav", "ref_text": "hi"}])
    row = got["r1"]
    assert row["error"] is None and row["voice"] == str((tmp_path / "n.voice").resolve())
    assert (row["ref_audio"], row["ref_text"]) == (None, "the clip's words")
    assert row["ref_digest"] == file_digest(tmp_path / "n.voice")
    clip = got["r2"]  # a clip's row beside it is as it always was
    assert (clip["voice"], clip["ref_text"], clip["error"]) == (None, "hi", None)
    assert clip["ref_digest"] == file_digest(tmp_path / "ref.wav") != row["ref_digest"]


def test_x_vector_only_drops_a_voices_transcript(tmp_path):
    fakes.fake_voice(tmp_path / "n.voice")
    row = _prepare(tmp_path, [{"voice": "n.voice"}], x_vector_only=True)["r1"]
    assert row["error"] is None and row["ref_text"] is None


@pytest.mark.parametrize(
    "row, says",
    [
        ({"voice": "n.voice", "ref_audio": "ref.wav"}, WITH_REF_AUDIO),
        ({"voice": "n.voice", "ref_text": "words"}, WITH_REF_TEXT),
        ({"voice": "gone.voice"}, "voice not found: "),
        ({"voice": "ref.wav"}, "voice unreadable: "),
        ({"voice": "other.voice"}, "another model"),
    ],
    ids=["with-ref-audio", "with-ref-text", "missing", "a-clip", "another-model"],
)
def test_a_voice_the_row_cannot_use_fails_that_row_alone(tmp_path, row, says):
    fakes.fake_voice(tmp_path / "n.voice")
    fakes.fake_voice(tmp_path / "other.voice", model="fake-base-other")
    (tmp_path / "ref.wav").write_bytes(b"RIFF clip")
    got = _prepare(tmp_path, [row, {"voice": "n.voice"}])
    assert says in got["r1"]["error"]
    assert got["r2"]["error"] is None


def test_a_model_that_clones_no_voice_fails_voice_rows(tmp_path):
    fakes.fake_voice(tmp_path / "n.voice")
    got = _prepare(tmp_path, [{"voice": "n.voice", "speaker": "vivian"}, {"speaker": "vivian"}],
                   model="fake")  # fmt: skip
    assert "fake is no Base checkpoint" in got["r1"]["error"]
    assert got["r2"]["error"] is None and got["r2"]["voice"] is None


def _spec(**voice) -> JobSpec:
    return JobSpec("batch", "m.parquet", OutputOptions(Path("o")), voice=VoiceOptions(**voice))


def test_the_voice_flag_fills_only_rows_without_a_reference_of_their_own():
    rows = _rows([{}, {"ref_audio": "own.wav", "ref_text": "own"}, {"voice": "own.voice"}])
    a, b, c = apply_reference_defaults(rows, _spec(voice="cli.voice")).to_pylist()
    assert Path(a["voice"]).is_absolute() and a["voice"].endswith("cli.voice")
    assert (a["ref_audio"], b["voice"], b["ref_audio"], c["voice"]) == (
        None, None, "own.wav", "own.voice")  # fmt: skip
    a, b, c = apply_reference_defaults(rows, _spec(ref_audio="cli.wav", ref_text="t")).to_pylist()
    assert (a["ref_audio"].endswith("cli.wav"), a["ref_text"]) == (True, "t")
    assert (c["ref_audio"], c["ref_text"], c["voice"]) == (None, None, "own.voice")


@pytest.mark.parametrize("given", [{"ref_audio": "a.wav"}, {"ref_text": "words"}])
def test_the_voice_flag_goes_with_no_reference_flag(given):
    with pytest.raises(UsageError, match="--voice with --ref-"):
        VoiceOptions(voice="n.voice", **given)


def test_a_voice_flag_for_another_model_is_a_usage_error(tmp_path):
    voice = fakes.fake_voice(tmp_path / "n.voice", model="fake-base")
    check_voice_flag(str(voice), fakes.FakeTextModel("fake-base"))
    with pytest.raises(UsageError, match=r"^--voice: voice .* another model"):
        check_voice_flag(str(voice), fakes.FakeTextModel("fake-base-other"))
    with pytest.raises(UsageError, match="^--voice: voice not found"):
        check_voice_flag(str(tmp_path / "gone.voice"), fakes.FakeTextModel("fake-base"))
