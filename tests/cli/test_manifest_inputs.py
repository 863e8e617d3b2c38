"""qtts batch on every manifest kind (a folder or glob of Parquet parts, JSON Lines, CSV, TSV) and
mapped column names, on the fake model (tests/fakes.py): each gives the results and audio of the
same rows as one Parquet manifest; a folder resumes after a new part and splits into shards; each
bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import csv
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from cli_calls import qtts, summary

pytestmark = pytest.mark.usefixtures("fake_model")

ROWS = [
    {"id": f"utt{i:02d}", "text": f"Sentence number {i}, spoken.", "speaker": sp, "seed": seed}
    for i, (sp, seed) in enumerate(
        [("ryan", 3), (None, None), ("vivian", 7), ("eric", None), (None, 11), ("ryan", 0)]
    )
]
# The same rows as a real manifest names them: --id-column utt_id --text-column sentence
# --column speaker=spk --column seed=rng.
RENAMED = {"id": "utt_id", "text": "sentence", "speaker": "spk", "seed": "rng"}
MAPPING = ["--id-column", "utt_id", "--text-column", "sentence",
           "--column", "speaker=spk", "--column", "seed=rng"]  # fmt: skip


def renamed(rows: list[dict]) -> list[dict]:
    return [{RENAMED[k]: v for k, v in r.items()} for r in rows]


def outputs(out) -> tuple[dict, dict]:
    """results.parquet by id (all but the path) and each file's samples."""
    table = pq.read_table(out / "results.parquet")
    res = {r["id"]: {k: v for k, v in r.items() if k != "path"} for r in table.to_pylist()}
    audio = {p.name: sf.read(p)[0] for p in out.glob("*.wav")}
    return res, audio


def batch(source, out, *extra):
    r = qtts("batch", source, "-o", out, "--speaker", "ryan", *extra)
    assert r.exit_code == 0, r.stderr
    return r


@pytest.fixture
def expected(tmp_path):
    """The rows as one Parquet manifest with the fields' own names, and what qtts made of it."""
    path = tmp_path / "one.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    batch(path, tmp_path / "expected")
    return outputs(tmp_path / "expected")


def write_parts(folder, rows, sizes, *, name="part-{:05d}.parquet"):
    """Parts written last first: the order qtts reads them in is their names', not the disk's."""
    folder.mkdir(parents=True, exist_ok=True)
    starts = np.cumsum([0, *sizes])
    for i in reversed(range(len(sizes))):
        part = pa.Table.from_pylist(renamed(rows[starts[i] : starts[i + 1]]))
        pq.write_table(part, folder / name.format(i))


def write_jsonl(path, rows):
    lines = [json.dumps({k: v for k, v in r.items() if v is not None}) for r in renamed(rows)]
    path.write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n")  # a blank line


def write_delimited(path, rows, sep):
    """CSV quoted as the csv module does (the texts hold commas); TSV as it is."""
    with path.open("w", newline="") as f:
        quoting = csv.QUOTE_MINIMAL if sep == "," else csv.QUOTE_NONE
        writer = csv.writer(f, delimiter=sep, quoting=quoting)
        writer.writerow(RENAMED[k] for k in ROWS[0])
        writer.writerows(["" if v is None else v for v in r.values()] for r in rows)


def test_a_folder_of_parts_reads_as_one_dataset_in_sorted_order(tmp_path, expected):
    parts = tmp_path / "parts"
    write_parts(parts, ROWS, [2, 1, 3])
    (parts / "_SUCCESS").write_text("")  # what Spark leaves beside its parts
    out = tmp_path / "out"
    batch(parts, out, *MAPPING)
    assert outputs(out)[0] == expected[0]
    for name, samples in expected[1].items():
        np.testing.assert_array_equal(outputs(out)[1][name], samples)


@pytest.mark.parametrize("kind", ["glob", "jsonl", "csv", "tsv"])
def test_every_kind_gives_what_one_parquet_gives(tmp_path, expected, kind):
    if kind == "glob":
        write_parts(tmp_path / "parts", ROWS, [4, 2])
        source = str(tmp_path / "parts" / "*.parquet")
    elif kind == "jsonl":
        source = tmp_path / "m.jsonl"
        write_jsonl(source, ROWS)
    else:
        source = tmp_path / f"m.{kind}"
        write_delimited(source, ROWS, "," if kind == "csv" else "\t")
    out = tmp_path / "out"
    batch(source, out, *MAPPING)
    res, audio = outputs(out)
    assert res == expected[0]
    assert audio.keys() == expected[1].keys()
    for name, samples in expected[1].items():
        np.testing.assert_array_equal(audio[name], samples)
    # qtts results re-reads the input with the mapping the job recorded.
    r = qtts("results", out)
    assert r.exit_code == 0, r.stderr
    assert (summary(r)["total"], summary(r)["ok"]) == (len(ROWS), len(ROWS))


def test_a_new_part_in_the_folder_resumes(tmp_path):
    parts = tmp_path / "parts"
    write_parts(parts, ROWS[:4], [2, 2])
    out = tmp_path / "out"
    assert summary(batch(parts, out, *MAPPING))["ok"] == 4
    done = {p.name: p.stat().st_mtime_ns for p in out.glob("*.wav")}
    write_parts(parts, ROWS[4:], [2], name="part-00002.parquet")
    s = summary(batch(parts, out, *MAPPING))
    assert (s["ok"], s["skipped"], s["total"]) == (2, 4, 6)
    assert all((out / name).stat().st_mtime_ns == t for name, t in done.items())
    res = outputs(out)[0]
    assert [res[f"utt{i:02d}"]["row"] for i in range(6)] == [1, 2, 3, 4, 5, 6]
    assert {r["status"] for r in res.values()} == {"ok"}
    # The out dir remembers the folder: another folder is another input.
    write_parts(tmp_path / "other", ROWS, [6])
    r = qtts("batch", tmp_path / "other", "-o", out, "--speaker", "ryan", *MAPPING)
    assert r.exit_code == 2 and f"holds the job of {parts}" in r.stderr


@pytest.mark.parametrize("layout", ["files", "parquet"])
def test_an_out_dir_inside_the_parts_folder_is_not_read_as_parts(tmp_path, layout):
    """Its results.parquet and Parquet shards are outputs: the rerun skips every row, and an
    older job's out dir beside it is passed over too."""
    parts = tmp_path / "parts"
    write_parts(parts, ROWS, [3, 3])
    for out in (parts / "old", parts / "out"):
        s = summary(batch(parts, out, *MAPPING, "--output", layout))
        assert (s["ok"], s["total"]) == (len(ROWS), len(ROWS))
    s = summary(batch(parts, parts / "out", *MAPPING, "--output", layout))
    assert (s["skipped"], s["ok"], s["total"]) == (len(ROWS), 0, len(ROWS))
    # a glob reaching into them passes them over too
    glob = summary(batch(str(parts / "**" / "*.parquet"), tmp_path / "g", *MAPPING))
    assert (glob["ok"], glob["total"]) == (len(ROWS), len(ROWS))


@pytest.mark.parametrize("glob", [False, True])
@pytest.mark.parametrize("out", ["parts", "above"])  # -o parts, or -o ds for parts in ds/data
def test_an_out_dir_writing_into_the_parts_folder_is_refused_first(tmp_path, glob, out):
    """The parts' folder as the out dir, or as its archive folder (a hub-style ds/data/): the
    next run would read results.parquet or the Parquet shards as parts."""
    parts = tmp_path / "parts" if out == "parts" else tmp_path / "ds" / "data"
    write_parts(parts, ROWS, [6])
    source = parts / "*.parquet" if glob else parts
    out_dir = parts if out == "parts" else parts.parent
    r = qtts("batch", source, "-o", out_dir, "--speaker", "ryan", "--output", "parquet", *MAPPING)
    assert r.exit_code == 2 and "writes into the manifest's parts folder" in r.stderr, r.stderr
    assert sorted(p.name for p in out_dir.rglob("*") if p.is_file()) == ["part-00000.parquet"]


def test_shards_over_a_folder_cover_every_row_once(tmp_path, expected):
    parts = tmp_path / "parts"
    write_parts(parts, ROWS, [3, 3])
    out = tmp_path / "out"
    done = [summary(batch(parts, out, *MAPPING, "--num-shards", 2, "--shard-index", i))["ok"]
            for i in (0, 1)]  # fmt: skip
    assert sum(done) == len(ROWS) and all(done)
    assert outputs(out)[0] == expected[0]


def _parts_with(tmp_path, second: pa.Table):
    parts = tmp_path / "parts"
    write_parts(parts, ROWS[:2], [2])
    pq.write_table(second, parts / "part-00001.parquet")
    return parts


def _lacks_speaker(tmp_path):
    return _parts_with(tmp_path, pa.table({"utt_id": ["x"], "sentence": ["y"], "rng": [1]}))


def _float_seed(tmp_path):
    second = pa.table({"utt_id": ["x"], "sentence": ["y"], "spk": ["ryan"], "rng": [1.5]})
    return _parts_with(tmp_path, second)


def _no_sentence(tmp_path):
    path = tmp_path / "m.parquet"
    pq.write_table(pa.table({"utt_id": ["a"], "text": ["hi"], "spk": ["ryan"]}), path)
    return path


def _not_json(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"utt_id": "a", "sentence": "hi"}\n\n{"utt_id": "b", "sentence": oops}\n')
    return path


def _unknown_extension(tmp_path):
    path = tmp_path / "m.xlsx"
    path.write_text("")
    return path


def _empty_folder(tmp_path):
    (tmp_path / "parts").mkdir()
    return tmp_path / "parts"


@pytest.mark.parametrize(
    "make, words",
    [
        (_lacks_speaker, ["part part-00001.parquet has no column 'spk'", "part-00000.parquet"]),
        (_float_seed, ["part part-00001.parquet has column 'rng' as double", "int64"]),
        (
            _no_sentence,
            [
                "m.parquet",
                "no column 'sentence' (--text-column sentence)",
                "its columns: utt_id, text, spk",
            ],
        ),  # fmt: skip
        (_not_json, ["m.jsonl line 3: not JSON"]),
        (_unknown_extension, ["m.xlsx: unknown extension '.xlsx'"]),
        (_empty_folder, ["folder", "holds no .parquet files"]),
    ],
)
def test_bad_inputs_are_one_line_exit_2(tmp_path, make, words):
    out = tmp_path / "out"
    r = qtts("batch", make(tmp_path), "-o", out, "--speaker", "ryan", *MAPPING)
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert line.startswith("Error: manifest ") and "\n" not in line, r.stderr
    for word in words:
        assert word in line
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--column", "speaker"], "give FIELD=NAME"),
        (["--column", "text=sentence"], "use --text-column"),
        (["--column", "timbre=spk"], "unknown field"),
        (["--column", "seed=a", "--column", "seed=b"], "maps 'seed' twice"),
    ],
)
def test_bad_column_flags_exit_2(tmp_path, flags, words):
    r = qtts("batch", _no_sentence(tmp_path), "-o", tmp_path / "out", *flags)
    assert r.exit_code == 2 and words in r.stderr


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".txt"])
@pytest.mark.parametrize(("codec", "named"), [("utf-16", "UTF-16"), ("utf-16-le", "UTF-16"),
                                              ("utf-32", "UTF-32")])  # fmt: skip
def test_text_in_utf16_or_utf32_is_named_as_such(tmp_path, suffix, codec, named):
    """Windows' "Unicode" text (UTF-16, with or without its byte-order mark): said so, not read
    as UTF-8 and refused for a field count or a JSON error at some line."""
    path = tmp_path / f"m{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, ROWS)
    elif suffix == ".txt":
        path.write_text("".join(f"{r['text']}\n" for r in ROWS))
    else:
        write_delimited(path, ROWS, "," if suffix == ".csv" else "\t")
    path.write_bytes(path.read_text().encode(codec))
    out = tmp_path / "out"
    command = ["synth"] if suffix == ".txt" else ["batch"]  # synth reads lines of text
    r = qtts(*command, path, "-o", out, "--speaker", "ryan", *([] if suffix == ".txt" else MAPPING))
    assert r.exit_code == 2, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and f"is not UTF-8: it looks like {named} text" in line, line
    assert str(path) in line and not out.exists()
