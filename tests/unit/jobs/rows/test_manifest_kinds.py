"""Manifests of every kind as Arrow rows: Parquet parts as one dataset (sorted order, widened
types, refused when the parts disagree), JSON Lines and CSV/TSV, mapped column names."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qtts.core.errors import ManifestError, UsageError
from qtts.core.jobs.contract.spec import ManifestColumns
from qtts.core.jobs.rows.manifest import read_manifest
from qtts.core.jobs.rows.sources import find_manifest


def _rows(source, columns=None, **kw) -> list[tuple]:
    table = read_manifest(str(source), columns, **kw)
    return list(zip(*(table[c].to_pylist() for c in ("row", "id", "text")), strict=True))


def test_parts_are_one_dataset_in_sorted_path_order(tmp_path):
    parts = tmp_path / "ds"
    (parts / "b=2").mkdir(parents=True)
    # Written out of order; one part int32 ids, one int64; one text categorical, one null typed.
    pq.write_table(
        pa.table({"id": pa.array([3], pa.int64()), "text": ["c"]}), parts / "b=2/p.parquet"
    )
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()),
                             "text": pa.array(["a", "b"]).dictionary_encode()}),
                   parts / "a.parquet")  # fmt: skip
    pq.write_table(pa.table({"id": pa.array([4], pa.int64()), "text": pa.nulls(1)}),
                   parts / "c.parquet")  # fmt: skip
    pq.write_table(pa.table({"x": [1]}), parts / "_metadata.parquet")  # Spark's: skipped
    pq.write_table(pa.table({"x": [1]}), parts / ".hidden.parquet")
    assert _rows(parts) == [(1, "1", "a"), (2, "2", "b"), (3, "3", "c"), (4, "4", None)]
    assert _rows(f"{parts}/*.parquet") == [(1, "1", "a"), (2, "2", "b"), (3, "4", None)]


def test_a_folder_is_its_own_identity_and_reference_root(tmp_path):
    parts = tmp_path / "ds"
    parts.mkdir()
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), parts / "p.parquet")
    folder = find_manifest(str(parts))
    assert folder.base_dir == parts and folder.inputs() == [parts / "p.parquet", parts]
    assert find_manifest(f"{parts}/*.parquet").base_dir == parts
    assert find_manifest(str(parts / "p.parquet")).base_dir == parts


def test_parts_that_disagree_name_the_part_and_the_column(tmp_path):
    parts = tmp_path / "ds"
    parts.mkdir()
    pq.write_table(pa.table({"id": ["a"], "text": ["x"], "seed": [1]}), parts / "p0.parquet")
    pq.write_table(pa.table({"id": ["b"], "text": ["y"], "seed": ["7"]}), parts / "p1.parquet")
    with pytest.raises(ManifestError, match=r"\(part p1.parquet\): column 'seed' must be integ"):
        read_manifest(str(parts))
    pq.write_table(pa.table({"id": ["b"], "text": ["y"]}), parts / "p1.parquet")
    with pytest.raises(ManifestError, match="part p1.parquet has no column 'seed', which part p0"):
        read_manifest(str(parts))
    pq.write_table(pa.table({"id": ["b"], "text": ["y"], "seed": [1], "speaker": ["s"]}),
                   parts / "p1.parquet")  # fmt: skip
    with pytest.raises(ManifestError, match="part p1.parquet has a column 'speaker' that part p0"):
        read_manifest(str(parts))
    # Columns qtts does not read may differ.
    pq.write_table(pa.table({"id": ["b"], "text": ["y"], "seed": [2], "extra": [0.5]}),
                   parts / "p1.parquet")  # fmt: skip
    assert read_manifest(str(parts))["seed"].to_pylist() == [1, 2]


@pytest.mark.parametrize(
    "pattern, message",
    [("nothing-*.parquet", "no file matches"), ("*", "not a .parquet file")],
)
def test_globs_match_parquet_parts_only(tmp_path, pattern, message):
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), tmp_path / "p.parquet")
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ManifestError, match=message):
        read_manifest(str(tmp_path / pattern))


def test_csv_keeps_strings_quotes_and_blank_optionals(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text('id,text,speaker,seed\n007,"one, ""two""\nthree",ryan,5\n008,,,\n')
    table = read_manifest(str(path))
    assert table["id"].to_pylist() == ["007", "008"]  # not the numbers 7 and 8
    assert table["text"].to_pylist() == ['one, "two"\nthree', ""]  # empty text: a row error
    assert table["speaker"].to_pylist() == ["ryan", None]
    assert table["seed"].to_pylist() == [5, None]


def test_tsv_has_no_quoting(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_text('utt\tsentence\n1\tHe said "hi" twice\n')
    names = ManifestColumns.from_flags("utt", "sentence", None)
    assert _rows(path, names) == [(1, "1", 'He said "hi" twice')]


@pytest.mark.parametrize(
    "text, message",
    [
        ('id,text\nc1,"Stop!\nc2,second\nc3,third\n',  # pyarrow: one row, the rest its text
         r"m\.csv line 2: a quoted field opens here and is never closed"),
        ('id,text\nc1,ok\nc2,"Stop," he said\n', r"m\.csv line 3: a quote closes a field before"),
        ('id,text,speaker\nc1,ok,ryan\n\nc2,"two\nlines",ryan,extra\n',
         r"m\.csv line 4: 4 fields, where the header has 3"),
    ],
)  # fmt: skip
def test_csv_quoting_pyarrow_forgives_is_refused_at_its_line(tmp_path, text, message):
    path = tmp_path / "m.csv"
    path.write_text(text)
    with pytest.raises(ManifestError, match=message):
        read_manifest(str(path))


@pytest.mark.parametrize("name, sep", [("m.csv", ","), ("m.tsv", "\t")])
def test_delimited_refusals_name_the_line(tmp_path, name, sep):
    path = tmp_path / name
    path.write_bytes(f"id{sep}text\nc1{sep}ok\nc2{sep}caf".encode() + b"\xe9\n")
    with pytest.raises(ManifestError, match=f"{name} line 3: invalid UTF-8"):
        read_manifest(str(path))
    path.write_text(f"id{sep}text\nc1{sep}ok\nc2{sep}hello{sep}extra\n")
    with pytest.raises(ManifestError, match=f"{name} line 3: 3 fields, where the header has 2"):
        read_manifest(str(path))


def test_bytes_in_a_column_qtts_does_not_read_are_not_its_business(tmp_path):
    path = tmp_path / "m.csv"
    path.write_bytes(b"id,text,notes\na,hello,caf\xe9\n")
    assert _rows(path) == [(1, "a", "hello")]


def test_a_csv_that_cannot_be_opened_again_keeps_the_readers_error(tmp_path, monkeypatch):
    from qtts.core.jobs.rows import line_formats

    path = tmp_path / "m.csv"
    path.write_text("id,text\na,x,extra\n")  # pyarrow refuses; the scan cannot open it

    def denied(*_, **__):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(line_formats, "_count_csv_rows", denied)
    with pytest.raises(ManifestError, match="cannot read manifest .*Expected 2 columns, got 3"):
        read_manifest(str(path))


def test_a_long_csv_text_passes_the_strict_scan(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(f'id,text\nbook,"{"A chapter, read aloud. " * 20_000}"\n')  # 460 KB
    assert read_manifest(str(path))["text"][0].as_py().startswith("A chapter, read aloud.")


def test_jsonl_records_blank_lines_bom_and_late_fields(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": 1, "text": "a", "duration": 2.5}\n\n  \n'
                     b'{"id": 2, "text": "b", "speaker": "ryan", "seed": 9}\n')  # fmt: skip
    table = read_manifest(str(path))
    assert _rows(path) == [(1, "1", "a"), (2, "2", "b")]  # rows count records, not lines
    assert table["speaker"].to_pylist() == [None, "ryan"]
    assert table["seed"].to_pylist() == [None, 9]


@pytest.mark.parametrize(
    "lines, message",
    [
        (b'{"id": "a", "text": "x"}\n[1, 2]\n', "m.jsonl line 2: not a JSON object"),
        (b'{"id": "a", "text": "x"}\n\n{"id": "b", "text": "\xff"}\n', "line 3: invalid UTF-8"),
        (b'{"id": "a", "text": "x"}\n{"id": 2, "text": "y"}\n', "line 2: 'id' is an integer, "
                                                                 "expected a string .the first"),
        (b'{"id": "a", "text": "x", "seed": 1}\n{"id": "b", "text": "y", "seed": 1.5}\n',
         "line 2: 'seed' is a number, expected an integer"),
        (b'{"id": "a", "text": "x"\n', "line 1: not JSON"),
        (b'{"id": "a", "text": "x", "seed": 1}\n{"id": "b", "text": "y", "seed": 1e400}\n',
         "line 2: 'seed' is a number, expected an integer"),
        (b'{"id": "a", "text": "x", "seed": 99999999999999999999999}\n',
         "line 1: 'seed' is 99999999999999999999999, past what a 64-bit integer holds"),
        (b'{"id": "a", "text": "x", "seed": 1}\n{"id": "b", "text": "y", "seed": null}\n[1]\n',
         "line 3: not a JSON object"),
    ],
)  # fmt: skip
def test_jsonl_refusals_name_the_line(tmp_path, lines, message):
    path = tmp_path / "m.jsonl"
    path.write_bytes(lines)
    with pytest.raises(ManifestError, match=message):
        read_manifest(str(path))


@pytest.mark.parametrize("name", ["m.jsonl", "m.csv", "m.tsv"])
def test_empty_line_files_have_no_rows(tmp_path, name):
    (tmp_path / name).write_text("")
    assert read_manifest(str(tmp_path / name)).num_rows == 0


@pytest.mark.parametrize("name", ["m.jsonl", "m.csv", "m.parquet", "m.tsv"])
def test_a_missing_file_says_so(tmp_path, name):
    with pytest.raises(ManifestError, match=f"{name}: no such file"):
        read_manifest(str(tmp_path / name))


@pytest.mark.parametrize("name", ["m.jsonl", "m.csv", "ds"])
def test_results_read_ids_and_the_text_of_rows_without_one(tmp_path, name):
    rows = [{"utt": "a", "sentence": "x"}, {"utt": None, "sentence": "y"}]
    path = tmp_path / name
    if name == "ds":
        path.mkdir()
        pq.write_table(pa.Table.from_pylist(rows), path / "p.parquet")
    elif name.endswith("jsonl"):
        path.write_text('{"utt": "a", "sentence": "x"}\n{"utt": null, "sentence": "y"}\n')
    else:
        path.write_text("utt,sentence\na,x\n,y\n")
    names = ManifestColumns.from_flags("utt", "sentence", None)
    table = read_manifest(str(path), names, ("id",), text_if_null_id=True)
    got = list(zip(table["id"].to_pylist(), table["text"].to_pylist(), strict=True))
    assert got[1] == ((None if name != "m.csv" else ""), "y")


def test_column_flags():
    names = ManifestColumns.from_flags("id", "sentence", ["speaker=spk", " seed = rng "])
    assert names.renamed == {"seed": "rng", "speaker": "spk", "text": "sentence"}
    assert (names.column("id"), names.flag("id")) == ("id", None)
    assert names.flag("text") == "--text-column sentence"
    assert names.flag("speaker") == "--column speaker=spk"
    with pytest.raises(UsageError, match="no manifest field 'timbre'"):
        ManifestColumns({"timbre": "v"})


def test_a_path_with_wildcard_characters_that_exists_is_that_file(tmp_path):
    """`m[1].parquet` names a file, not the pattern that would match `m1.parquet`."""
    pq.write_table(pa.table({"id": ["literal"], "text": ["x"]}), tmp_path / "m[1].parquet")
    pq.write_table(pa.table({"id": ["other"], "text": ["y"]}), tmp_path / "m1.parquet")
    assert _rows(tmp_path / "m[1].parquet") == [(1, "literal", "x")]


def test_a_parquet_file_is_read_by_its_magic_bytes_whatever_its_extension(tmp_path):
    for name in ("m.pq", "m.parq", "manifest"):
        pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), tmp_path / name)
        assert _rows(tmp_path / name) == [(1, "a", "x")], name
    (tmp_path / "notes.md").write_text("# not a manifest\n")
    with pytest.raises(ManifestError, match="unknown extension '.md'"):
        find_manifest(str(tmp_path / "notes.md"))


def test_a_json_array_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('[{"id": "a", "text": "x"}, {"id": "b", "text": "y"}]')
    with pytest.raises(ManifestError, match=r"m\.json line 1: not a JSON object"):
        read_manifest(str(path))


def test_an_os_error_reads_as_its_words_not_its_errno():
    from qtts.core.jobs.rows.sources import unreadable

    error = unreadable("m.parquet", PermissionError(13, "Permission denied"))
    assert str(error) == "cannot read manifest m.parquet: Permission denied"
    error = unreadable("m.tsv", ValueError("CSV parse error: Expected 2 columns, got 3: a\tb\tc"))
    assert "'" not in str(error) and str(error).endswith("got 3: a\tb\tc")
