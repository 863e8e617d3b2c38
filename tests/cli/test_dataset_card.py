"""An out dir that is a dataset: every finished run and `qtts results` write OUT/README.md, a
dataset card whose YAML
parses and whose counts are the results', and with it the real client (datasets < 4) loads
`load_dataset(OUT)` (the folder itself, no data_dir) to the kept rows, audio decoded, in the files
and the Parquet layouts. A README.md of the user's own is never overwritten."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from fakes import fake_env, qtts_cmd

LOAD = """\
import json, sys
from datasets import load_dataset
ds = load_dataset(sys.argv[1], split="train")
row = ds[0]
# WebDataset's builder names columns by member suffix: the row's json holds the id
ids = ds["id"] if "id" in ds.column_names else [j["id"] for j in ds["json"]]
audio = row["audio" if "audio" in row else "wav"]
print(json.dumps({"ids": sorted(ids), "rate": audio["sampling_rate"],
                  "samples": len(audio["array"])}))
"""
TEXTS = {"a1": "One.", "b2": "Two words here.", "c3": "Three words said.", "d4": "[fail] Four."}


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(qtts_cmd(*args), capture_output=True, text=True, env=fake_env(),
                          timeout=180)  # fmt: skip


def card(out) -> tuple[dict, str]:
    text = (out / "README.md").read_text("utf-8")
    head, body = re.match(r"---\n(.*?)\n---\n(.*)", text, flags=re.S).groups()
    return yaml.safe_load(head), body


def counts(body: str) -> dict[str, int]:
    """The body's table of rows, ok, failed, pending, kept."""
    lines = [line for line in body.splitlines() if line.startswith("|")]
    names = [c.strip() for c in lines[0].strip("|").split("|")]
    values = [int(c) for c in lines[2].strip("|").split("|")]
    return dict(zip(names, values, strict=True))


@pytest.fixture(scope="module", params=["files", "parquet", "webdataset"])
def out(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    manifest = root / "m.parquet"
    table = {"id": list(TEXTS), "text": list(TEXTS.values()), "language": ["english"] * 4}
    pq.write_table(pa.table(table), manifest)
    out = root / "out"
    made = run("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o", out,
               "-q", "--output", request.param, "--shard-rows", 2)  # fmt: skip
    assert made.returncode == 3, made.stderr  # d4 failed, as asked
    return out


def layout_of(out) -> str:
    shards = {p.suffix for p in (out / "data").glob("*")} if (out / "data").is_dir() else set()
    return "webdataset" if ".tar" in shards else "parquet" if ".parquet" in shards else "files"


def load(out, tmp_path) -> dict:
    read = load_run(LOAD, out, tmp_path)
    assert read.returncode == 0, read.stderr[-3000:]
    return json.loads(read.stdout.strip().splitlines()[-1])


def load_run(code: str, out, tmp_path) -> subprocess.CompletedProcess:
    env = fake_env(HF_DATASETS_CACHE=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1")
    return subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True,
                          text=True, env=env, timeout=300)  # fmt: skip


@pytest.mark.parametrize("layout", ["files", "parquet", "webdataset"])
def test_a_finished_run_leaves_a_card_and_the_folder_loads(layout, tmp_path):
    """Straight after `qtts batch`, no `qtts results`: without a card, datasets took
    results.parquet for the dataset (the files layout: the rows without audio; the Parquet
    layout: a cast error beside the shards)."""
    manifest = tmp_path / "m.parquet"
    pq.write_table(pa.table({"id": ["a1", "b2"], "text": ["One.", "Two words."]}), manifest)
    out = tmp_path / "out"
    made = run("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o", out,
               "--output", layout, "--shard-rows", 1)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert f"dataset card: {out / 'README.md'} (load_dataset(OUT) reads it)" in made.stderr
    assert counts(card(out)[1])["ok"] == 2
    loaded = load(out, tmp_path / "hf")
    assert loaded["ids"] == ["a1", "b2"] and loaded["samples"] > 0


def test_the_card_says_what_results_say_and_load_dataset_reads_the_folder(out, tmp_path):
    r = run("results", out)
    assert r.returncode == 3, r.stderr  # a failed row: exit 3, as ever
    summary = json.loads(r.stdout)
    header, body = card(out)
    assert header["task_categories"] == ["text-to-speech"] and header["language"] == ["en"]
    assert header["size_categories"] == ["n<1K"]
    tars = header["configs"][0]["data_files"][0]["path"] == ["data/*.tar"]
    if not tars:  # WebDataset's builder types the members itself
        audio = [f for f in header["dataset_info"]["features"] if f["name"] == "audio"]
        assert audio == [{"name": "audio", "dtype": {"audio": {"sampling_rate": 24000}}}]
    got = counts(body)
    assert got == {"rows": summary["total"], "ok": summary["ok"], "failed": summary["failed"],
                   "pending": summary["pending"], "kept": summary["ok"]}  # fmt: skip
    assert (got["ok"], got["failed"]) == (3, 1) and "fake-0.6b" in body
    loaded = load(out, tmp_path / "all")
    assert loaded["ids"] == ["a1", "b2", "c3"] and loaded["rate"] == 24000
    assert loaded["samples"] > 0


def test_keep_rules_decide_what_load_dataset_gives(out, tmp_path):
    results = pq.read_table(out / "results.parquet").to_pylist()
    rates = {row["id"]: row["chars_per_s"] for row in results if row["status"] == "ok"}
    ceiling = sorted(rates.values())[1]  # the fastest row is left out
    r = run("results", out, "--max-chars-per-s", ceiling)
    assert r.returncode == 3, r.stderr
    kept = sorted(i for i, rate in rates.items() if rate <= ceiling)
    header, body = card(out)
    assert counts(body)["kept"] == len(kept) == 2
    assert f"--max-chars-per-s {ceiling:g}" in body
    if header["configs"][0]["data_files"][0]["path"] == ["data/*.tar"]:
        assert "the webdataset shards load every ok row" in body  # what it cannot do, said
        kept = sorted(rates)
    assert load(out, tmp_path / "kept")["ids"] == kept
    assert run("results", out, "--keep-all").returncode == 3
    assert load(out, tmp_path / "kept")["ids"] == sorted(rates)  # the same cache: a new card


STREAM = """\
import json, sys
from datasets import load_dataset
ds = load_dataset(sys.argv[1], split="train", streaming=True)
print(json.dumps([r.get("id") or (r.get("json") or {}).get("id") for r in ds]))
"""


def test_rules_that_keep_no_row_load_no_row_in_every_layout(out, tmp_path):
    """Keep rules that keep nothing: the card still parses and load_dataset(OUT) never gives a
    dropped row nor an Arrow type error (an empty `id in []` filter was typed null). The files
    and Parquet cards load no row: streamed, none comes; datasets < 4 refuses a split of no
    rows, so a plain load says there is no data. WebDataset shards cannot be filtered: they
    load every ok row, and the warning says so. It names metadata.jsonl only where the layout
    has one."""
    r = run("results", out, "--max-chars-per-s", "0.001")
    assert r.returncode == 3, r.stderr  # d4 failed; and nothing is kept
    header, body = card(out)
    assert counts(body)["kept"] == 0 and header["task_categories"] == ["text-to-speech"]
    warning = next(line for line in r.stderr.splitlines() if line.startswith("Warning: no ok row"))
    layout = layout_of(out)
    assert ("metadata.jsonl" in warning) == (layout == "files"), warning
    streamed = load_run(STREAM, out, tmp_path / "stream")
    assert streamed.returncode == 0, streamed.stderr[-3000:]
    got = json.loads(streamed.stdout.strip().splitlines()[-1])
    plain = load_run(LOAD, out, tmp_path / "plain")
    if layout == "webdataset":
        assert sorted(got) == ["a1", "b2", "c3"] and "every ok row" in warning
        assert plain.returncode == 0
    else:
        assert got == [] and "no row" in warning
        assert plain.returncode != 0 and "corresponds to no data" in plain.stderr, plain.stderr
    assert "ArrowTypeError" not in plain.stderr
    assert run("results", out, "--keep-all").returncode == 3


def test_the_cards_code_reads_the_rows_from_a_moved_out_dir(out, tmp_path):
    """The card's code names the out dir as the folder it runs in, never the path it was
    written at: copied elsewhere, with that place gone, it runs as pasted inside the copy."""
    assert run("results", out, "--keep-all").returncode == 3
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(out, moved)
    hidden = out.with_name(out.name + "-hidden")
    out.rename(hidden)
    try:
        assert str(out) not in (moved / "README.md").read_text("utf-8")
        got = card_code_reads(moved, tmp_path)
    finally:
        hidden.rename(out)
    assert "ds" in got and all(ids == ["a1", "b2", "c3"] for ids in got.values()), got


# What each layout's card code reads back: the ids, from the names that code binds.
READ_IDS = {
    "ds": 'sorted(ds["id"] if "id" in ds.column_names else [j["id"] for j in ds["json"]])',
    "shards": 'sorted(shards.to_table(columns=["id"])["id"].to_pylist())',
    "samples": 'sorted(json.loads(s["json"])["id"] for s in samples)',
    "cuts": "sorted(c.id for c in cuts)",
}


def card_code_reads(out, tmp_path) -> dict[str, list[str]]:
    """Runs the card's Python block as a user would paste it, from inside the out dir: {name it
    binds: the ids read}."""
    code = re.search(r"```python\n(.*?)```", card(out)[1], flags=re.S).group(1)
    show = "\n".join(
        f"if {name!r} in globals(): print(json.dumps([{name!r}, {ids}]))"
        for name, ids in READ_IDS.items()
    )  # fmt: skip
    env = fake_env(HF_DATASETS_CACHE=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1")
    read = subprocess.run([sys.executable, "-c", f"import json\n{code}\n{show}"], cwd=out,
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert read.returncode == 0, read.stderr[-3000:]
    return dict(json.loads(line) for line in read.stdout.strip().splitlines())


def test_the_cards_own_code_reads_the_rows_back(out, tmp_path):
    """The card's Python block (load_dataset(OUT), then the format's own client, from the
    format's module) runs as pasted and reads every ok row."""
    assert run("results", out).returncode == 3
    got = card_code_reads(out, tmp_path)
    assert "ds" in got and all(ids == ["a1", "b2", "c3"] for ids in got.values()), got
    assert len(got) == (1 if (out / "metadata.jsonl").exists() else 2)


def test_a_card_is_written_under_the_results_lock(out):
    """The card reads the views and writes itself under the lock their rebuild takes, so no
    rebuild lands between; a refresh gives way to a process holding it (which refreshes after
    its rebuild) and leaves the card as it was."""
    from filelock import FileLock

    from qtts.core.quality.dataset_card import refresh_card, write_card

    assert run("results", out).returncode == 3
    before = (out / "README.md").read_text()
    (out / "results.parquet").touch()  # views newer than the card: a refresh is due
    with FileLock(str(out / ".qtts" / "results.lock")):  # another process rebuilding
        assert write_card(out, wait_s=0.2) is None and refresh_card(out) is None
    assert (out / "README.md").read_text() == before
    card = refresh_card(out)
    assert card is not None and card.path == out / "README.md"
    assert counts(card.path.read_text().split("---\n", 2)[2]) == counts(before.split("---\n")[2])


def test_a_users_own_readme_is_never_overwritten(out):
    (out / "README.md").write_text("# My dataset\n", encoding="utf-8")
    r = run("results", out)
    assert (out / "README.md").read_text() == "# My dataset\n"
    elsewhere = out / ".qtts" / "README.md"
    assert f"the card went to {elsewhere}" in r.stderr.replace("\n", " ")
    assert json.loads(r.stdout)["card"] == str(elsewhere)
    assert yaml.safe_load(elsewhere.read_text().split("---\n")[1])["task_categories"]
    (out / "README.md").unlink()


def test_a_shar_out_dir_gets_a_card_without_a_hub_loader(tmp_path):
    """No Hub loader reads a Shar folder, and its recording part is a .tar: the card is written
    with its counts and says so, and names no WebDataset config over the Shar tars. Its code
    runs as pasted even where the out dir's path holds a quote and a backslash."""
    manifest = tmp_path / "m.parquet"
    pq.write_table(pa.table({"id": ["a1", "b2"], "text": ["One.", "Two words."]}), manifest)
    out = tmp_path / 'out "q" \\U'
    made = run("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o", out,
               "-q", "--output", "shar", "--shard-rows", 2)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert run("results", out).returncode == 0
    header, body = card(out)
    assert "configs" not in header
    assert counts(body)["ok"] == 2 and "no Hub loader reads the shar layout" in body
    # a running job's temp beside the shards: lhotse's in_dir= would take it for a field
    (out / "data" / ".recording.x-000001.tar.qtts-tmp-1-0").write_bytes(b"half")
    assert card_code_reads(out, tmp_path) == {"cuts": ["a1", "b2"]}  # lhotse, from the card


def test_the_card_follows_every_run_that_changes_the_views(tmp_path):
    """A job that switches the layout or adds rows rewrites the card: it never points at files
    that are gone (load_dataset(OUT) keeps working), and its counts are the new results'. A
    user's own README.md stays untouched by a run too."""
    manifest = tmp_path / "m.parquet"
    texts = {"a1": "One.", "b2": "Two words here."}
    pq.write_table(pa.table({"id": list(texts), "text": list(texts.values())}), manifest)
    out = tmp_path / "out"
    job = ("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o", out, "-q")
    assert run(*job).returncode == 0 and run("results", out).returncode == 0
    assert "metadata.jsonl" in json.dumps(card(out)[0]["configs"])
    switched = run(*job, "--output", "parquet")
    assert switched.returncode == 0, switched.stderr
    header, body = card(out)
    assert header["configs"][0]["data_files"][0]["path"] == ["data/*.parquet"]
    assert load(out, tmp_path / "switched")["ids"] == ["a1", "b2"]
    texts["c3"] = "Three words said."
    pq.write_table(pa.table({"id": list(texts), "text": list(texts.values())}), manifest)
    assert run(*job).returncode == 0
    assert counts(card(out)[1])["ok"] == 3
    (out / "README.md").write_text("# Mine\n", encoding="utf-8")
    assert run(*job, "--output", "webdataset").returncode == 0
    assert (out / "README.md").read_text() == "# Mine\n"  # the run's refresh skips a user's own
