"""--sample-rate, --loudness and --trim-silence through whole jobs on the fake model (a sine a row):
every layout writes the clip as finished and describes it at its rate, a rerun with another
setting redoes its rows and says which, trimming cuts a joined long row's ends and nothing
between, a clip the ceiling holds back is flagged in its row, a bad value is one usage line, and
with none of them the decoder's audio is written as it was. In process (CliRunner)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile

import fakes
import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from cli_calls import qtts, results, summary

from qtts.core.jobs.output.writer import encode_audio

pytestmark = pytest.mark.usefixtures("fake_model")

ROWS = [{"id": f"r{i}", "text": f"row number {i} says a few words", "seed": i} for i in range(3)]
PAD_S = 0.1
# One 16-bit step: what reading a clip back may differ by
PCM_LSB = 1 / 32768
# A resampler's output is the input's length times the ratio, give or take its rounding
RESAMPLED_SAMPLES = 2
# DNSMOS (1 to 5) of one clip resampled to 16 kHz by the job or by the scorer: resamplers differ
# in their filters' last bits only
SAME_CLIP_SCORE = 0.01


def batch(manifest, out, *extra):
    r = qtts("batch", manifest, "-o", out, "--speaker", "ryan", "-q", *extra)
    assert r.exit_code == 0, r.output
    return r


@pytest.mark.parametrize(
    "args, says",
    [
        (["--sample-rate", "7000"], "--sample-rate must be in [8000, 48000] Hz, got 7000"),
        (["--loudness", "3"], "--loudness must be in (-70, 0] LUFS, got 3"),
        (["--peak-db", "-2"], "--peak-db is the ceiling of --loudness"),
        (["--trim-pad", "0.2"], "--trim-pad applies to --trim-silence"),
        (["--trim-silence", "--trim-threshold", "5"], "--trim-threshold must be in [-100, 0) dB"),
    ],
)
def test_a_bad_value_is_one_usage_line(tmp_path, write_manifest, args, says):
    r = qtts("batch", write_manifest(ROWS), "-o", tmp_path / "out", "--speaker", "ryan", *args)
    assert r.exit_code == 2 and says in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "out").exists()


def test_without_the_options_the_decoders_audio_is_written_as_it_was(tmp_path, write_manifest):
    out = tmp_path / "out"
    batch(write_manifest(ROWS), out, "--save-codes")
    for row_id, row in results(out).items():
        codes = np.load(out / f"{row_id}.codes.npy")
        made = encode_audio(fakes.fake_audio(codes), 24_000, "wav")
        assert (out / f"{row_id}.wav").read_bytes() == made
        assert (row["sample_rate"], row["loudness_lufs"], row["loudness_status"]) == (
            24_000,
            None,
            None,
        )


def test_a_rerun_with_another_rate_redoes_every_row_and_says_why(tmp_path, write_manifest):
    m, out = write_manifest(ROWS), tmp_path / "out"
    batch(m, out)
    at_24k = results(out)
    r = qtts("batch", m, "-o", out, "--speaker", "ryan", "--sample-rate", 16_000)
    assert r.exit_code == 0 and summary(r)["ok"] == 3
    redo = [line for line in r.stderr.splitlines() if "redoing" in line]
    assert len(redo) == 1 and "sample_rate off -> 16000" in redo[0], r.stderr
    for row_id, row in results(out).items():
        info = sf.info(str(out / f"{row_id}.wav"))
        assert info.samplerate == row["sample_rate"] == 16_000
        assert info.frames == row["num_samples"]
        expected = at_24k[row_id]["num_samples"] * 16_000 / 24_000
        assert abs(info.frames - expected) <= RESAMPLED_SAMPLES
    again = batch(m, out, "--sample-rate", 16_000)
    assert (summary(again)["skipped"], summary(again)["ok"]) == (3, 0)
    # the model's own rate is no setting: back to it redoes the rows, then it is the default
    back = batch(m, out, "--sample-rate", 24_000)
    assert summary(back)["ok"] == 3
    assert summary(batch(m, out))["skipped"] == 3


def _tar_members(path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


@pytest.mark.parametrize("layout", ["webdataset", "parquet", "shar"])
def test_every_archive_layout_writes_and_describes_the_rate(tmp_path, write_manifest, layout):
    out = tmp_path / layout
    batch(write_manifest(ROWS), out, "--output", layout, "--sample-rate", 22_050)
    rows = results(out)
    assert {r["sample_rate"] for r in rows.values()} == {22_050}
    data = out / "data"
    clips: dict[str, bytes] = {}
    if layout == "webdataset":
        for tar in data.glob("*.tar"):
            members = _tar_members(tar)
            for name, meta in members.items():
                if name.endswith(".json"):
                    key = name.removesuffix(".json")
                    assert json.loads(meta)["sample_rate"] == 22_050
                    clips[json.loads(meta)["id"]] = members[f"{key}.wav"]
    elif layout == "parquet":
        for part in data.glob("*.parquet"):
            table = pq.read_table(part)
            features = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]
            assert features["audio"]["sampling_rate"] == 22_050  # what datasets decodes it at
            clips |= {r["id"]: r["audio"]["bytes"] for r in table.to_pylist()}
    else:
        for cuts in data.glob("cuts.*.jsonl.gz"):
            recordings = _tar_members(data / cuts.name.replace("cuts.", "recording.")
                                      .replace(".jsonl.gz", ".tar"))  # fmt: skip
            for line in gzip.open(cuts, "rt"):
                cut = json.loads(line)
                assert cut["recording"]["sampling_rate"] == 22_050
                assert cut["recording"]["num_samples"] == rows[cut["id"]]["num_samples"]
                clips[cut["id"]] = recordings[f"{cut['id']}.wav"]
    assert clips.keys() == rows.keys()
    for row_id, clip in clips.items():
        audio, rate = sf.read(io.BytesIO(clip), dtype="float32")
        assert (rate, audio.size) == (22_050, rows[row_id]["num_samples"])


def test_a_joined_long_row_is_trimmed_at_its_ends_only(tmp_path, write_manifest, monkeypatch):
    """Each segment comes with half a second of silence at each end: the row's file keeps at most
    the pad of it at its two ends, and every pause between its segments whole."""
    silence = np.zeros(12_000, dtype=np.float32)  # 0.5 s at 24 kHz
    sine = fakes.fake_audio
    monkeypatch.setattr(fakes, "fake_audio", lambda codes, rate=24_000: np.concatenate(
        [silence, sine(codes, rate), silence]))  # fmt: skip
    long = " ".join(f"word{i}" for i in range(30))  # 30 tokens to the fake: cut at 10
    rows = [{"id": "long", "text": long, "seed": 1}, {"id": "short", "text": "a b c", "seed": 2}]
    out = tmp_path / "out"
    batch(write_manifest(rows), out, "--trim-silence", "--max-segment-tokens", 10)
    rows = results(out)
    assert rows["long"]["segments"] == 3
    for row_id, row in rows.items():
        audio, rate = sf.read(out / f"{row_id}.wav", dtype="float32")
        assert (audio.size, rate) == (row["num_samples"], 24_000)
        assert abs(row["duration_s"] - audio.size / rate) < 1 / rate
        loud = np.flatnonzero(np.abs(audio) > PCM_LSB)
        assert loud[0] <= round(PAD_S * rate) and audio.size - 1 - loud[-1] <= round(PAD_S * rate)
        words = sum(map(len, row["text"].split()))
        assert row["chars_per_s"] == pytest.approx(words / row["duration_s"])
        quiet = np.abs(audio) <= PCM_LSB  # the pauses between segments: 0.5 + 0.25 + 0.5 s
        runs = np.diff(np.flatnonzero(np.diff(np.concatenate([[0], quiet, [0]]).astype(int))))
        longest = max(runs[::2], default=0)
        assert (longest >= round(1.25 * rate) - 2) == (row_id == "long")


def test_a_clip_the_ceiling_holds_back_is_flagged_in_its_row(tmp_path, write_manifest):
    """A sine's peak is 3 dB over its loudness: at -3 LUFS it would pass -1 dBFS."""
    out = tmp_path / "out"
    batch(write_manifest(ROWS), out, "--loudness", -3, "--format", "flac")
    for row_id, row in results(out).items():
        audio, _ = sf.read(out / f"{row_id}.flac", dtype="float32")
        assert np.max(np.abs(audio)) <= 10 ** (-1 / 20)
        assert row["loudness_status"] == "peak_limited" and row["loudness_lufs"] < -3
    out = tmp_path / "quiet"
    batch(write_manifest(ROWS), out, "--loudness", -23)
    assert {r["loudness_status"] for r in results(out).values()} == {"normalized"}


LOAD = """\
import json, sys
from datasets import load_dataset
ds = load_dataset(sys.argv[1], split="train")
print(json.dumps({r["id"]: [r["audio"]["sampling_rate"], len(r["audio"]["array"])] for r in ds}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["files", "parquet"])
def test_the_card_and_load_dataset_give_the_rate_written(tmp_path, write_manifest, layout):
    """qtts results' card declares the clips' rate, so load_dataset(OUT) decodes them as written
    (a card that said 24 kHz would have datasets resample every clip to it)."""
    pytest.importorskip("datasets")
    out = tmp_path / "out"
    batch(write_manifest(ROWS), out, "--output", layout, "--sample-rate", 16_000)
    r = qtts("results", out)
    assert r.exit_code == 0, r.output
    card = (out / "README.md").read_text("utf-8")
    assert "sampling_rate: 16000" in card and "- Sample rate: 16000 Hz" in card
    env = fakes.fake_env(HF_DATASETS_CACHE=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1")
    read = subprocess.run([sys.executable, "-c", LOAD, str(out)], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    assert read.returncode == 0, read.stderr[-3000:]
    loaded = json.loads(read.stdout.strip().splitlines()[-1])
    assert loaded == {k: [16_000, row["num_samples"]] for k, row in results(out).items()}


@pytest.mark.slow
def test_qtts_score_reads_the_clips_at_the_rate_written(tmp_path, write_manifest):
    """The same rows at 16 kHz and at 24 kHz score alike (DNSMOS reads 16 kHz: one is resampled
    by the job, the other by the scorer), and every row is scored."""
    m = write_manifest(ROWS)
    scores = {}
    for rate in (16_000, 24_000):
        out = tmp_path / str(rate)
        batch(m, out, "--sample-rate", rate)
        p = subprocess.run(fakes.qtts_cmd("score", out, "--no-speaker"), capture_output=True,
                           text=True, env=fakes.fake_env(), timeout=300)  # fmt: skip
        assert p.returncode == 0 and json.loads(p.stdout)["scored"] == len(ROWS), p.stderr
        scores[rate] = {k: r["dnsmos_ovrl"] for k, r in results(out).items()}
    assert scores[16_000].keys() == scores[24_000].keys()
    for k, want in scores[24_000].items():
        assert abs(scores[16_000][k] - want) <= SAME_CLIP_SCORE, k


def test_a_layout_switch_moves_the_finished_clips_as_they_are(tmp_path, write_manifest):
    """A repack (no model) moves the 16 kHz normalized clips into Parquet shards: the shard's
    Audio feature is at their rate, and each row keeps its loudness."""
    m, out = write_manifest(ROWS), tmp_path / "out"
    batch(m, out, "--sample-rate", 16_000, "--loudness", -20)
    before = results(out)
    r = batch(m, out, "--sample-rate", 16_000, "--loudness", -20, "--output", "parquet")
    assert summary(r)["repacked"] == len(ROWS)
    for part in (out / "data").glob("*.parquet"):
        table = pq.read_table(part)
        features = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]
        assert features["audio"]["sampling_rate"] == 16_000
        for row in table.to_pylist():
            audio, rate = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
            assert (rate, audio.size) == (16_000, before[row["id"]]["num_samples"])
    after = results(out)
    for k, row in before.items():
        assert after[k]["loudness_lufs"] == row["loudness_lufs"]
        assert after[k]["loudness_status"] == row["loudness_status"] == "normalized"
