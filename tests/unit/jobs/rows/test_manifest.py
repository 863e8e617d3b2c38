"""Rows in: text lines and Parquet manifests as Arrow tables, id rules, whole-input refusals."""

from __future__ import annotations

import io
import sys
import unicodedata

import pyarrow as pa
import pytest

from qtts.core.errors import ManifestError
from qtts.core.jobs.rows.ids import file_key, file_keys, id_errors, id_problem, unsafe_id_candidates
from qtts.core.jobs.rows.manifest import (
    BLANK,
    check_unique_ids,
    read_manifest,
    read_text_lines,
)


def test_text_lines_count_blank_lines_and_skip_them(tmp_path):
    p = tmp_path / "in.txt"
    p.write_bytes(b"\xef\xbb\xbfone\r\n\n   \nfour\nfive")
    rows = read_text_lines(str(p)).to_pylist()
    assert [(r["row"], r["id"], r["text"]) for r in rows] == [
        (1, "000001", "one"),
        (4, "000004", "four"),
        (5, "000005", "five"),
    ]


def test_text_lines_from_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\n\nb\n")))
    assert read_text_lines("-")["id"].to_pylist() == ["000001", "000003"]


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
    a, b = read_manifest(str(path)).to_pylist()
    assert (a["row"], a["id"], a["text"], a["speaker"], a["seed"], a["language"]) == (
        1, "a", "hi", "Ryan", 7, None)  # fmt: skip
    assert (b["row"], b["text"], b["speaker"], b["seed"]) == (2, None, None, None)


def test_parquet_integer_ids_become_strings(write_manifest):
    path = write_manifest([{"id": 12, "text": "x"}])
    assert read_manifest(str(path))["id"].to_pylist() == ["12"]


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
        read_manifest(str(write_manifest(rows)))


def test_not_a_parquet_file(tmp_path):
    p = tmp_path / "m.parquet"
    p.write_text("id,text\n")
    with pytest.raises(ManifestError, match="cannot read manifest"):
        read_manifest(str(p))


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
    return pa.table({"row": list(range(1, len(ids) + 1)), "id": pa.array(ids, pa.string())})


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


def test_empty_ids_are_no_duplicates_each_fails_alone():
    check_unique_ids(_rows("a", "", "", " ", "\u3000", None))  # each row: "id is empty"
    with pytest.raises(ManifestError, match=r"duplicate id 'a' \(rows 1 and 4\)"):
        check_unique_ids(_rows("a", "", "", "a"))


def test_missing_manifest_says_so(tmp_path):
    with pytest.raises(ManifestError, match="nope.parquet: no such file"):
        read_manifest(str(tmp_path / "nope.parquet"))


def test_huge_seeds_keep_their_integer_type(write_manifest):
    path = write_manifest([{"id": "a", "text": "x", "seed": 2**62 + 1}])
    assert read_manifest(str(path))["seed"].to_pylist() == [2**62 + 1]


# The vectorized screens must never miss what the Python rules catch.
EVERY_CHAR = [chr(c) for c in range(0x3100)] + ["\u3000", "\ufeff", "\U0001f600"]


def test_the_blank_screen_is_python_whitespace():
    texts = pa.array(EVERY_CHAR + [c * 3 for c in EVERY_CHAR] + ["a " + c for c in EVERY_CHAR])
    blank = pa.compute.match_substring_regex(texts, BLANK).to_pylist()
    assert blank == [not t.strip() for t in texts.to_pylist()]


def test_the_unsafe_id_screen_covers_every_rule():
    ids = [*EVERY_CHAR, *(f"a{c}b" for c in EVERY_CHAR), *(f"{c}x" for c in EVERY_CHAR),
           "", "..", ".x", "C:x", "x" * 201, "x" * 200, None]  # fmt: skip
    flagged = unsafe_id_candidates(pa.array(ids, pa.string())).to_pylist()
    for row_id, screened in zip(ids, flagged, strict=True):
        assert screened or id_problem(row_id) is None, repr(row_id)
    assert id_errors(pa.chunked_array([pa.array(ids, pa.string())])).to_pylist() == [
        id_problem(i) for i in ids
    ]


def test_file_keys_are_file_key():
    ids = ["Take", "take", "café", unicodedata.normalize("NFD", "café"), "Straße", None, "ǅ"]
    keys = file_keys(pa.chunked_array([pa.array(ids)])).to_pylist()
    assert keys == [None if i is None else file_key(i) for i in ids]


def test_categorical_columns_are_their_values(tmp_path):
    import pyarrow.parquet as pq

    table = pa.table({"id": ["a", "b"], "text": ["x", "y"],
                      "speaker": pa.array(["ryan", "ryan"]).dictionary_encode()})  # fmt: skip
    pq.write_table(table, tmp_path / "m.parquet")
    assert read_manifest(str(tmp_path / "m.parquet"))["speaker"].to_pylist() == [
        "ryan", "ryan"]  # fmt: skip


def test_a_column_named_like_a_missing_field_is_warned_of(write_manifest, caplog):
    """A misspelled optional column ("speakr", "Language") would be ignored without a word and
    every row take the command line's default: one warning per such column, naming the field.
    A column that is no field's look-alike ("notes"), or one whose field is there, says nothing."""
    import logging

    from qtts.core.jobs.rows.manifest import read_manifest

    rows = [{"id": "a", "text": "Hi.", "speakr": "ryan", "Language": "english", "notes": "x"}]
    with caplog.at_level(logging.WARNING, logger="qtts"):
        table = read_manifest(str(write_manifest(rows)))
    assert table["speaker"].to_pylist() == [None]  # not read: the default applies
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert "column 'speakr' is not one qtts reads" in said[0] and "'speaker'?" in said[0]
    assert "column 'Language'" in said[1] and "'language'?" in said[1]
    caplog.clear()
    fine = [{"id": "a", "text": "Hi.", "speaker": "ryan", "speakers": "x", "notes": "y",
             "language_id": "en", "src_instruct": "z"}]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="qtts"):
        read_manifest(str(write_manifest(fine)))
    # "speakers" beside "speaker": the field is there; "language_id", "src_instruct": a field's
    # name as one word of their own is another column, not a misspelling
    assert caplog.records == []
