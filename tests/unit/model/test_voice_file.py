"""The voice file: what it holds reads back as written, its header is read without its tensors,
and every file that is no voice this qtts can use is refused in one line naming it."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from qtts.core.jobs.state.ref_digests import RefDigests
from qtts.core.model.voice_file import (
    IN_CONTEXT,
    X_VECTOR,
    Voice,
    VoiceFileError,
    file_digest,
    read_header,
    read_voice,
    refusal,
    write_voice,
)

RNG = np.random.default_rng(7)
CODES = RNG.integers(0, 2048, size=(30, 16), dtype=np.int64)
XVEC = RNG.standard_normal(64).astype(np.float32)


def _icl(**kw) -> Voice:
    base = dict(mode=IN_CONTEXT, transcript="Hello there.", x_vector=XVEC, ref_codes=CODES,
                model="abc123", model_name="Qwen/Qwen3-TTS-12Hz-1.7B-Base", reference="ref.wav",
                reference_seconds=2.4)  # fmt: skip
    return Voice(**{**base, **kw})


def test_an_in_context_voice_reads_back_as_written(tmp_path):
    path = tmp_path / "narrator.voice"
    write_voice(path, _icl())
    head = read_header(path)
    assert (head.mode, head.transcript, head.frames, head.dims, head.model) == (
        IN_CONTEXT, "Hello there.", 30, 64, "abc123")  # fmt: skip
    assert (head.reference, head.reference_seconds, head.version) == ("ref.wav", 2.4, 1)
    voice = read_voice(path)
    np.testing.assert_array_equal(voice.ref_codes, CODES)  # codes: exact
    np.testing.assert_array_equal(voice.x_vector, XVEC)  # stored, not computed: the same bytes
    assert voice.x_vector.dtype == np.float32 and voice.ref_codes.dtype == np.int64
    assert [p.name for p in tmp_path.iterdir()] == ["narrator.voice"]  # no temp file left


def test_an_x_vector_voice_has_no_codes_and_no_transcript(tmp_path):
    path = tmp_path / "x.voice"
    write_voice(path, _icl(mode=X_VECTOR, transcript=None, ref_codes=None))
    head = read_header(path)
    assert (head.mode, head.transcript, head.frames) == (X_VECTOR, None, 0)
    assert read_voice(path).ref_codes is None


def test_a_voice_that_contradicts_its_mode_is_not_written(tmp_path):
    with pytest.raises(ValueError):
        write_voice(tmp_path / "bad.voice", _icl(ref_codes=None))
    assert list(tmp_path.iterdir()) == []


def _foreign(tmp_path, meta: dict, tensors: dict | None = None):
    path = tmp_path / "other.safetensors"
    save_file(tensors or {"x_vector": XVEC}, str(path), metadata=meta)
    return path


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda d: d / "nope.voice", "voice not found: "),
        (lambda d: (d / "a.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt ") and d / "a.wav",
         "voice unreadable: "),
        (lambda d: _foreign(d, {"format": "pt"}), "is not a qtts voice file"),
        (lambda d: _foreign(d, {"format": "qtts.voice", "version": "2", "mode": "x_vector"}),
         "format version '2'; this qtts reads up to 1"),
        (lambda d: _foreign(d, {"format": "qtts.voice", "version": "1", "mode": "in_context",
                                "transcript": "hi"}),
         "in-context mode without int64 ref_codes"),
        (lambda d: _foreign(d, {"format": "qtts.voice", "version": "1", "mode": "loud"}),
         "mode 'loud' is none of"),
    ],
    ids=["missing", "a-wav", "other-safetensors", "later-version", "no-codes", "bad-mode"],
)  # fmt: skip
def test_what_is_no_usable_voice_is_refused_naming_the_file(tmp_path, make, says):
    path = make(tmp_path)
    with pytest.raises(VoiceFileError, match=says) as e:
        read_header(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_huge_header_length_is_no_voice_file(tmp_path):
    path = tmp_path / "big.voice"
    path.write_bytes(struct.pack("<Q", 1 << 40) + json.dumps({}).encode())
    with pytest.raises(VoiceFileError, match="not a safetensors file"):
        read_header(path)


def test_a_model_takes_only_voices_of_its_own_identity(tmp_path):
    path = tmp_path / "n.voice"
    write_voice(path, _icl())
    head = read_header(path)
    assert refusal(head, "abc123", "BASE") is None
    other = refusal(head, "def456", "OTHER")
    assert "another model (identity def456)" in other and "abc123" in other
    assert "OTHER is no Base checkpoint" in refusal(head, None, "OTHER")


def test_the_digest_is_the_one_rows_record(tmp_path):
    """voice info's digest is the ref_digest of the rows the voice speaks (RefDigests')."""
    path = tmp_path / "n.voice"
    write_voice(path, _icl())
    first = file_digest(path)
    assert first == RefDigests(tmp_path).digest(str(path))
    write_voice(path, _icl(transcript="Another line."))
    assert file_digest(path) == RefDigests(tmp_path).digest(str(path)) != first
