"""Rows in (text lines, Parquet) and row validation."""

from __future__ import annotations

import io
import sys
import unicodedata

import fakes
import pyarrow as pa
import pytest

from qtts.core.jobs.budget import FrameBudget
from qtts.core.jobs.manifest import (
    ManifestError,
    check_unique_ids,
    id_problem,
    read_parquet_manifest,
    read_text_lines,
)
from qtts.core.jobs.validation import RowDefaults, validate_rows


def test_text_lines_count_blank_lines_and_skip_them(tmp_path):
    p = tmp_path / "in.txt"
    p.write_bytes(b"\xef\xbb\xbfone\r\n\n   \nfour\nfive")
    rows = read_text_lines(str(p))
    assert [(r.row, r.id, r.text) for r in rows] == [
        (1, "000001", "one"),
        (4, "000004", "four"),
        (5, "000005", "five"),
    ]


def test_text_lines_from_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\n\nb\n")))
    assert [r.id for r in read_text_lines("-")] == ["000001", "000003"]


def test_invalid_utf8_names_every_bad_line(tmp_path):
    p = tmp_path / "in.txt"
    p.write_bytes(b"ok\nbad \xff here\nok\n\xc3\n")
    with pytest.raises(ManifestError, match=r"invalid UTF-8 at line 2 \(byte 5\), line 4"):
        read_text_lines(str(p))


def test_missing_text_file(tmp_path):
    with pytest.raises(ManifestError, match="cannot read"):
        read_text_lines(str(tmp_path / "nope.txt"))


def test_parquet_nulls_and_empty_optionals(write_manifest):
    path = write_manifest(
        [
            {"id": "a", "text": "hi", "speaker": "Ryan", "seed": 7},
            {"id": "b", "text": None, "speaker": "", "seed": None},
        ]
    )
    a, b = read_parquet_manifest(str(path))
    assert (a.row, a.id, a.text, a.speaker, a.seed, a.language) == (1, "a", "hi", "Ryan", 7, None)
    assert (b.row, b.text, b.speaker, b.seed) == (2, None, None, None)


def test_parquet_integer_ids_become_strings(write_manifest):
    path = write_manifest([{"id": 12, "text": "x"}])
    assert read_parquet_manifest(str(path))[0].id == "12"


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"id": "a"}], "missing required column"),
        ([{"id": "a", "text": 3}], "column 'text' must be strings"),
        ([{"id": "a", "text": "x", "seed": "9"}], "column 'seed' must be integers"),
    ],
)
def test_parquet_refused(write_manifest, rows, message):
    with pytest.raises(ManifestError, match=message):
        read_parquet_manifest(str(write_manifest(rows)))


def test_not_a_parquet_file(tmp_path):
    p = tmp_path / "m.parquet"
    p.write_text("id,text\n")
    with pytest.raises(ManifestError, match="cannot read manifest"):
        read_parquet_manifest(str(p))


@pytest.mark.parametrize(
    "row_id, fragment",
    [
        (None, "null"),
        ("", "empty"),
        ("a/b", "path separator"),
        ("..\\x", "path separator"),
        ("..", "starts with a dot"),
        (".hidden", "starts with a dot"),
        ("a\x00b", "NUL"),
        ("/abs", "path separator"),
        ("C:evil", "absolute"),
        ("tab\there", "control character"),
        ("x" * 201, "too long"),
    ],
)
def test_unsafe_ids(row_id, fragment):
    assert fragment in id_problem(row_id)


@pytest.mark.parametrize("row_id", ["000001", "utt-1_a.b", "a..b", "日本語", "x" * 200])
def test_safe_ids(row_id):
    assert id_problem(row_id) is None


def _rows(*ids):
    from qtts.core.jobs.manifest import InputRow

    return [InputRow(row=i + 1, id=x, text="t") for i, x in enumerate(ids)]


def test_duplicate_ids_refuse_the_manifest():
    with pytest.raises(ManifestError, match=r"duplicate id 'b' \(rows 2 and 4\)"):
        check_unique_ids(_rows("a", "b", None, "b", None))


def test_ids_writing_the_same_file_refuse_the_manifest():
    nfd = unicodedata.normalize("NFD", "café")
    with pytest.raises(ManifestError, match="would write the same file"):
        check_unique_ids(_rows("Take", "take"))
    with pytest.raises(ManifestError, match="would write the same file"):
        check_unique_ids(_rows("café", nfd))
    check_unique_ids(_rows("a", "b", None, None))


# -- validation ------------------------------------------------------------------------------------
def _validate(rows, model="fake", budget=FrameBudget(2048), defaults=RowDefaults("vivian"), **kw):
    return validate_rows(rows, fakes.FakeTextModel(model), budget, defaults, **kw)


def _row(**kw):
    from qtts.core.jobs.manifest import InputRow

    return InputRow(**{"row": 1, "id": "r1", "text": "hello there", **kw})


def test_valid_row_takes_defaults_and_budget():
    v = _validate([_row(language="English", seed=5)])
    (req,) = v.requests
    assert (req.speaker, req.language, req.seed, req.row) == ("vivian", "english", 5, 1)
    assert req.max_new_tokens == FrameBudget(2048).max_new_tokens(2)
    assert v.estimated_frames == {"r1": FrameBudget(2048).estimate_frames(2)}


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"text": "   "}, "empty text"),
        ({"text": None}, "text is null"),
        ({"id": "../x"}, "unsafe id"),
        ({"speaker": "nobody"}, "unknown speaker 'nobody'; this model has: eric, ryan, vivian"),
        ({"language": "klingon"}, "unknown language 'klingon'"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"seed": -1}, "seed must be in"),
        ({"text": " ".join(["w"] * 2000)}, "text too long for the frame budget"),
    ],
)
def test_bad_rows_fail_with_reasons(fields, reason):
    v = _validate([_row(**fields), _row(row=2, id="ok")])
    assert [r.id for r in v.requests] == ["ok"]
    ((row, message),) = v.rejected
    assert row.row == 1 and reason in message


def test_explicit_budget_is_exact_and_never_too_long():
    v = _validate([_row(text=" ".join(["w"] * 2000))], budget=FrameBudget(2048, explicit=7))
    assert v.requests[0].max_new_tokens == 7


def test_base_model_needs_reference_audio(tmp_path):
    (tmp_path / "ref.wav").write_bytes(b"RIFF")
    rows = [
        _row(id="a"),
        _row(id="b", ref_audio="gone.wav"),
        _row(id="c", ref_audio="ref.wav", ref_text="words"),
    ]
    v = _validate(rows, model="fake-base", defaults=RowDefaults(), ref_dir=tmp_path)
    reasons = {row.id: msg for row, msg in v.rejected}
    assert "missing ref_audio" in reasons["a"] and "ref_audio not found" in reasons["b"]
    (req,) = v.requests
    assert req.ref_audio == str((tmp_path / "ref.wav").resolve()) and req.ref_text == "words"


def test_warnings_are_counted_once_per_message():
    rows = [_row(id=f"r{i}", instruct="happy") for i in range(3)]
    v = _validate(rows, model="fake-0.6b")
    assert all(r.instruct is None for r in v.requests)
    assert list(v.warnings.values()) == [3]


def test_string_seed_column_values_fail(write_manifest):
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("seed", pa.float64())])
    path = write_manifest([{"id": "a", "text": "x", "seed": 2.0}], schema=schema)
    (req,) = _validate(read_parquet_manifest(str(path))).requests
    assert req.seed == 2
