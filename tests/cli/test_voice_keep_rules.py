"""The voice's keep rules: --min-speaker-sim and --min-speaker-centroid choose what metadata.jsonl
lists and are saved for every later rebuild, and the speaking rate against the voice's own
median (rate_ratio_min / rate_ratio_max) has a band. The fake model makes the rows; the speaker
scores are written into scores.parquet by hand, as `qtts score` keys them, so this proves the
views' plumbing, not any speaker model."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_calls import qtts

from qtts.core.jobs.output.keep_rules import read_keep_rules
from qtts.core.jobs.output.results import rebuild_out_dir
from qtts.core.quality.dataset import open_dataset
from qtts.core.quality.scores import write_scores

pytestmark = pytest.mark.usefixtures("fake_model")

# row id -> (speaker_sim, speaker_sim_centroid) given by hand
SPEAKER = {
    "000001": (0.91, 0.97),
    "000002": (0.62, 0.96),  # far from its reference clip
    "000003": (0.90, 0.71),  # drifted from its voice's other rows
    "000004": (0.88, 0.95),
}


@pytest.fixture
def out(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("One line.\nTwo lines here.\nThree lines said here.\nFour.\n")
    out = tmp_path / "out"
    r = qtts("synth", src, "--speaker", "vivian", "-o", out)
    assert r.exit_code == 0, r.stderr
    rows = open_dataset(out).rows
    sims = [SPEAKER[i] for i in rows["id"].to_pylist()]
    write_scores(out / "scores.parquet", pa.table({
        "id": rows["id"], "file_name": rows["file_name"], "stamp": rows["stamp"],
        "speaker_sim": pa.array([s for s, _ in sims], pa.float64()),
        "speaker_sim_centroid": pa.array([c for _, c in sims], pa.float64()),
        "speaker_scorer": pa.array(["by-hand"] * rows.num_rows)}))  # fmt: skip
    return out


def listed(out) -> list[str]:
    return [json.loads(line)["id"] for line in (out / "metadata.jsonl").read_text().splitlines()]


def test_speaker_rules_choose_what_metadata_lists_and_are_saved(out):
    r = qtts("results", out, "--min-speaker-sim", "0.8")
    assert r.exit_code == 0, r.stderr
    assert listed(out) == ["000001", "000003", "000004"]
    r = qtts("results", out, "--min-speaker-sim", "0.8", "--min-speaker-centroid", "0.9")
    assert r.exit_code == 0, r.stderr
    assert listed(out) == ["000001", "000004"]
    saved = read_keep_rules(out)
    assert saved.bounds == {"min-speaker-sim": 0.8, "min-speaker-centroid": 0.9}
    rebuild_out_dir(out)  # a finishing shard, `qtts score`: the same rules again
    assert listed(out) == ["000001", "000004"]
    results = pq.read_table(out / "results.parquet", columns=["id", "speaker_sim", "kept"])
    assert results["kept"].to_pylist() == [True, False, False, True]
    quality = json.loads(r.stdout.strip().splitlines()[-1])["quality"]
    assert quality["percentiles"]["speaker_sim_centroid"]["n"] == 4 and quality["kept"] == 2


def test_the_rate_ratio_is_against_the_voices_median_and_has_a_band(out):
    r = qtts("results", out)
    assert r.exit_code == 0, r.stderr
    table = pq.read_table(out / "results.parquet").to_pylist()
    rates = [row["chars_per_s"] for row in table]
    median = sorted(rates)[1:3]
    median = sum(median) / 2  # four rows of one voice and language: the middle two's mean
    for row in table:
        assert row["rate_ratio_min"] == pytest.approx(row["chars_per_s"] / median)
        assert row["rate_ratio_max"] == row["rate_ratio_min"]  # a whole row is one piece
    ratios = sorted(row["rate_ratio_min"] for row in table)
    low, high = ratios[1] - 1e-9, ratios[2] + 1e-9  # the two rows nearest the median
    r = qtts("results", out, "--min-rate-ratio", low, "--max-rate-ratio", high)
    assert r.exit_code == 0, r.stderr
    want = [row["id"] for row in table if low <= row["rate_ratio_min"] <= high]
    assert listed(out) == want and len(want) == 2
    assert read_keep_rules(out).bounds == {"min-rate-ratio": low, "max-rate-ratio": high}
    rebuild_out_dir(out)  # a finishing shard, `qtts score`: the same band again
    assert listed(out) == want


def test_the_report_draws_the_voice_measures(out, tmp_path):
    page = tmp_path / "report.html"
    r = qtts("results", out, "--report", page, "--keep-all")
    assert r.exit_code == 0, r.stderr
    text = page.read_text()
    for column in ("speaker_sim", "speaker_sim_centroid", "rate_ratio_min", "rate_ratio_max"):
        assert f"<h2>{column}</h2>" in text, column
