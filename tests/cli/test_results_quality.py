"""qtts results OUT: the quality summary, keep rules that choose what metadata.jsonl lists (kept
across rebuilds), and the HTML report. The fake model (tests/fakes.py) makes the rows; the
DNSMOS scores are written into scores.parquet by hand, as `qtts score` would key them, so this
proves the views' plumbing, not any scorer."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_calls import qtts

from qtts.core.jobs.output.results import rebuild_out_dir
from qtts.core.quality.dataset import open_dataset
from qtts.core.quality.scores import write_scores

pytestmark = pytest.mark.usefixtures("fake_model")

# row id -> DNSMOS overall given by hand (None: not scored)
DNSMOS = {"000001": 3.6, "000002": 2.4, "000003": 3.1, "000004": None, "000005": 3.9}


@pytest.fixture
def out(tmp_path):
    src = tmp_path / "lines.txt"
    lines = ["One line.", "Two lines here.", "A third one [runaway].", "Four.", "Five and more."]
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    r = qtts("synth", src, "--speaker", "vivian", "-o", out)
    assert r.exit_code == 0, r.stderr
    rows = open_dataset(out).rows  # id, file_name, stamp: what qtts score keys its table by
    values = [DNSMOS[i] for i in rows["id"].to_pylist()]
    write_scores(out / "scores.parquet", pa.table({
        "id": rows["id"], "file_name": rows["file_name"], "stamp": rows["stamp"],
        "dnsmos_ovrl": pa.array(values, pa.float64()),
        "dnsmos_scorer": pa.array(["by-hand"] * rows.num_rows)}))  # fmt: skip
    return out


def listed(out) -> list[str]:
    return [json.loads(line)["id"] for line in (out / "metadata.jsonl").read_text().splitlines()]


def test_results_prints_a_quality_summary(out):
    r = qtts("results", out)
    assert r.exit_code == 0, r.stderr
    quality = json.loads(r.stdout.strip().splitlines()[-1])["quality"]
    assert quality["ok"] == 5 and quality["kept"] is None
    assert quality["percentiles"]["dnsmos_ovrl"]["n"] == 4  # one row not scored
    assert quality["outside"]["hit_frame_budget"] == 1 and quality["outside"]["low_dnsmos"] == 1
    assert "quality of 5 ok rows" in r.stderr and "dnsmos_ovrl" in r.stderr
    assert listed(out) == list(DNSMOS)  # no rules: every ok row


def test_keep_rules_filter_metadata_keep_every_result_and_survive_rebuilds(out):
    r = qtts("results", out, "--min-dnsmos", "3.0", "--no-budget-hits")
    assert r.exit_code == 0, r.stderr
    want = ["000001", "000005"]  # 2.4 too low, 000003 hit its budget, 000004 unscored
    assert listed(out) == want
    results = pq.read_table(out / "results.parquet").to_pylist()
    assert [row["id"] for row in results] == list(DNSMOS)  # results keep every row
    assert [row["id"] for row in results if row["kept"]] == want
    assert json.loads(r.stdout.strip().splitlines()[-1])["quality"]["kept"] == 2
    rebuild_out_dir(out)  # as a finishing shard or a later `qtts results` does
    assert listed(out) == want
    r = qtts("results", out, "--keep-all")
    assert r.exit_code == 0, r.stderr
    assert listed(out) == list(DNSMOS)
    assert "kept" not in pq.read_schema(out / "results.parquet").names


def test_new_rules_replace_the_saved_ones(out):
    assert qtts("results", out, "--min-dnsmos", "3.5").exit_code == 0
    assert listed(out) == ["000001", "000005"]
    assert qtts("results", out, "--no-budget-hits").exit_code == 0
    assert listed(out) == ["000001", "000002", "000004", "000005"]


def test_keep_all_with_rules_and_out_of_range_rules_are_usage_errors(out):
    r = qtts("results", out, "--keep-all", "--min-dnsmos", "3")
    assert r.exit_code == 2 and "--keep-all" in r.stderr
    assert qtts("results", out, "--min-dnsmos", "7").exit_code == 2
    assert qtts("results", out, "--max-repeat-ratio", "-0.1").exit_code == 2


def test_a_rule_on_an_unscored_column_says_why_nothing_is_listed(out):
    r = qtts("results", out, "--max-cer", "0.1")
    assert r.exit_code == 3, r.stderr  # rules that keep no row: the dataset loads nothing
    assert "cer, which no row has yet (run qtts score first)" in r.stderr
    assert "no ok row meets the keep rules (--max-cer 0.1): there is no metadata.jsonl" in (
        r.stderr
    )
    assert not (out / "metadata.jsonl").exists()  # an empty one breaks the AudioFolder loader
    assert qtts("results", out, "--keep-all").exit_code == 0
    assert listed(out) == list(DNSMOS)  # back when a rule lets rows through


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


@pytest.mark.parametrize("where", ["missing-folder", "a-folder"])
def test_a_report_that_cannot_be_written_is_one_line_before_any_rebuild(out, tmp_path, where):
    page = tmp_path / "nowhere" / "report.html" if where == "missing-folder" else tmp_path
    before = (out / "results.parquet").stat().st_mtime_ns
    r = qtts("results", out, "--report", page, "--min-dnsmos", "3")
    assert r.exit_code == 2, r.stderr
    assert f"--report {page}" in r.stderr and "qtts-tmp" not in r.stderr
    assert (out / "results.parquet").stat().st_mtime_ns == before  # nothing rebuilt, no rule kept


def test_report_draws_each_summarized_column(out, tmp_path):
    page = tmp_path / "report.html"
    r = qtts("results", out, "--report", page, "--min-dnsmos", "3")
    assert r.exit_code == 0, r.stderr
    quality = json.loads(r.stdout.strip().splitlines()[-1])["quality"]
    parser = _Tags()
    parser.feed(page.read_text())
    assert parser.tags.count("svg") == len(quality["percentiles"])
    text = page.read_text()
    assert "--min-dnsmos 3" in text and "dnsmos_ovrl" in text and "hit_frame_budget" in text
    assert f"wrote the quality report to {page.resolve()}" in r.stderr  # says where it went
    assert json.loads(r.stdout.strip().splitlines()[-1])["report"] == str(page.resolve())


LOAD = """\
import sys
from datasets import load_dataset
ds = load_dataset("audiofolder", data_dir=sys.argv[1], split="train")
print(ds.num_rows, ds.column_names)
"""


def test_an_all_filtered_out_dir_is_refused_by_nothing_downstream(out, tmp_path):
    """Keep rules that keep no row leave no metadata.jsonl (a 0-byte one made datasets' loader
    fail with an IndexError), say why, and the real AudioFolder loader (datasets < 4) opens the
    out dir: without metadata it lists the audio files themselves."""
    pytest.importorskip("datasets")
    import subprocess
    import sys

    from fakes import fake_env

    r = qtts("results", out, "--min-dnsmos", "4.5")  # the best row scored 3.9
    assert r.exit_code == 3, r.stderr
    assert "no ok row meets the keep rules (--min-dnsmos 4.5)" in r.stderr
    assert "the keep rules keep none of them" in r.stderr
    assert not (out / "metadata.jsonl").exists()
    env = fake_env(HF_DATASETS_CACHE=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1")
    read = subprocess.run([sys.executable, "-c", LOAD, str(out)], capture_output=True,
                          text=True, env=env, timeout=180)  # fmt: skip
    assert read.returncode == 0, read.stderr[-2000:]
    assert read.stdout.split()[0] == str(len(DNSMOS)), read.stdout
    card = (out / "README.md").read_text("utf-8").replace("\n", " ")  # which says so too
    assert "there is no metadata.jsonl" in card and "load_dataset(OUT) gives none" in card
    assert "what load_dataset gives" not in card  # its config points at no row (test_dataset_card)


def test_what_results_tells_cron(out, tmp_path):
    """The JSON line and the exit code agree: `complete` is every row with an outcome (ok or
    failed; a rerun retries the failed), `failed` counts the failures and `kept` the ok rows
    the keep rules keep; exit 3 when a row failed or the rules keep no row, else 0."""
    r = qtts("results", out)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.exit_code == 0 and got["complete"] and (got["failed"], got["kept"]) == (0, 5)
    r = qtts("results", out, "--min-dnsmos", "3.5")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.exit_code == 0 and got["kept"] == 2  # some kept: a dataset to train on
    r = qtts("results", out, "--min-dnsmos", "4.5")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.exit_code == 3 and got["kept"] == 0 and got["failed"] == 0 and got["complete"]
    src = tmp_path / "failing.txt"
    src.write_text("One line.\nA line that fails [fail].\n")
    failing = tmp_path / "failing"
    assert qtts("synth", src, "--speaker", "vivian", "-o", failing).exit_code == 3
    r = qtts("results", failing)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.exit_code == 3, r.stderr
    assert (got["pending"], got["failed"], got["complete"], got["kept"]) == (0, 1, True, 1)
    assert "1 of 2 rows ok, 1 failed, 0 pending (complete)" in r.stderr
