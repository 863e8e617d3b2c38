"""`qtts score` end to end: an AudioFolder of real speech (espeak-ng) against noise and a corrupt
file, resume, the ASR round trip on a tiny random Whisper, a qtts out dir whose views keep the
scores through every rebuild, and the one-line usage errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from fakes import fake_env, qtts_cmd
from speech import CORRUPT, NOISE, SENTENCES, copy_folder, make_audiofolder, speak

from qtts.core.quality.score_pass import ScoreOptions, score_path

MARGIN = 1.0  # DNSMOS overall: real speech above white noise by at least this (1 to 5 scale)
SPEECH = list(SENTENCES)


def run(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(qtts_cmd(*args), capture_output=True, text=True, env=fake_env(),
                          timeout=timeout)  # fmt: skip


def summary(proc: subprocess.CompletedProcess) -> dict:
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout  # stdout is the one JSON line; logs go to stderr
    return json.loads(lines[0])


def by_name(path) -> dict[str, dict]:
    return {r["file_name"]: r for r in pq.read_table(path / "scores.parquet").to_pylist()}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_audiofolder(tmp_path_factory.mktemp("speech") / "data")


def test_speech_scores_above_noise_a_corrupt_file_fails_alone_and_a_rerun_skips(folder, tmp_path):
    data = copy_folder(folder, tmp_path / "data")
    p = run("score", data)
    assert p.returncode == 3, p.stderr
    s = summary(p)
    assert (s["rows"], s["scored"], s["skipped"], s["failed"]) == (5, 4, 0, 1)
    assert set(s["stats"]["dnsmos_ovrl"]) == {"n", "mean", "p5", "p50", "p95"}
    reasons = [line for line in p.stderr.splitlines() if CORRUPT in line]
    assert len(reasons) == 1 and "corrupt.wav: unreadable audio: " in reasons[0]
    rows = by_name(data)
    assert rows[CORRUPT]["error"].startswith("unreadable audio") and rows[CORRUPT]["dnsmos_ovrl"] \
        is None  # fmt: skip
    assert all(rows[n]["error"] is None for n in [*SPEECH, NOISE])
    assert min(rows[n]["dnsmos_ovrl"] for n in SPEECH) > rows[NOISE]["dnsmos_ovrl"] + MARGIN
    assert rows[NOISE]["dnsmos_scorer"].startswith("dnsmos-p835:speechmos-")

    p = run("score", data)  # scored files are skipped; the failed one is tried again
    assert p.returncode == 3 and summary(p)["skipped"] == 4 and summary(p)["scored"] == 0
    assert by_name(data) == rows

    speak("Something else was said here.", data / SPEECH[1])  # a replaced file is stale
    shutil.copy2(data / NOISE, data / CORRUPT)  # and a mended one scores
    p = run("score", data)
    assert p.returncode == 0, p.stderr
    assert (summary(p)["scored"], summary(p)["skipped"], summary(p)["failed"]) == (2, 3, 0)
    again = by_name(data)
    assert again[SPEECH[0]] == rows[SPEECH[0]]
    assert again[SPEECH[1]]["dnsmos_ovrl"] != rows[SPEECH[1]]["dnsmos_ovrl"]
    assert again[CORRUPT]["error"] is None and again[CORRUPT]["dnsmos_ovrl"] is not None


def test_the_asr_round_trip_on_a_tiny_random_whisper(folder, tmp_path):
    """Proves the plumbing, not accuracy: the Whisper here is built offline with random weights
    (qtts.core.tiny.whisper), so it hears gibberish and every error rate is high. What it
    proves: the checkpoint loads through transformers, windows are batched per language, each
    row gets asr_text, cer and wer (no wer for Chinese), the scorer's identity is recorded, a
    rerun skips, and another checkpoint scores every row again."""
    from qtts.core.tiny.whisper import make_tiny_whisper

    data = copy_folder(folder, tmp_path / "data")
    shutil.copy2(data / NOISE, data / "zh.wav")
    with open(data / "metadata.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"file_name": "zh.wav", "text": "你好，世界", "language": "chinese"}))
    options = ScoreOptions(dnsmos=False, asr_model=str(make_tiny_whisper(tmp_path / "w")),
                           batch_size=2)  # fmt: skip
    s = score_path(data, options)
    assert (s["rows"], s["scored"], s["failed"]) == (6, 5, 1)
    rows = by_name(data)
    for name in [*SPEECH, NOISE, "zh.wav"]:
        row = rows[name]
        assert isinstance(row["asr_text"], str) and row["asr_scorer"].startswith("asr:")
        assert row["cer"] is not None and row["cer"] >= 0 and row["dnsmos_ovrl"] is None
    assert rows["zh.wav"]["wer"] is None and rows[SPEECH[0]]["wer"] is not None
    assert score_path(data, options)["scored"] == 0
    other = ScoreOptions(dnsmos=False, asr_model=str(make_tiny_whisper(tmp_path / "w2", seed=1)))
    assert score_path(data, other)["scored"] == 5


def test_an_out_dirs_views_carry_the_scores_through_every_rebuild(tmp_path, write_manifest):
    rows = [{"id": k, "text": f"line {k}", "seed": n} for n, k in enumerate("abc")]
    out = tmp_path / "out"
    assert run("batch", write_manifest(rows), "-o", out, "--speaker", "ryan").returncode == 0
    p = run("score", out)
    assert p.returncode == 0 and summary(p)["scored"] == 3, p.stderr
    assert pq.read_table(out / "scores.parquet")["id"].to_pylist() == ["a", "b", "c"]

    def shown(view: str = "results") -> list:
        if view == "metadata":
            lines = (out / "metadata.jsonl").read_text().splitlines()
            return [json.loads(line)["dnsmos_ovrl"] for line in lines]
        return pq.read_table(out / "results.parquet")["dnsmos_ovrl"].to_pylist()

    scored = shown()
    assert None not in scored and shown("metadata") == scored
    assert run("results", out).returncode == 0 and shown() == scored  # kept by a rebuild

    rows[2]["seed"] = 99  # row c is redone: its old score is stale
    assert run("batch", write_manifest(rows), "-o", out, "--speaker", "ryan").returncode == 0
    assert shown() == [*scored[:2], None]
    p = run("score", out)
    assert (summary(p)["scored"], summary(p)["skipped"]) == (1, 2)
    assert shown()[:2] == scored[:2] and shown()[2] is not None

    scored = shown()  # a layout switch repacks the same audio: its scores still hold
    switch = run("batch", write_manifest(rows), "-o", out, "--speaker", "ryan", "--output",
                 "webdataset")  # fmt: skip
    assert switch.returncode == 0 and json.loads(switch.stdout)["repacked"] == 3
    assert shown() == scored
    p = run("score", out)
    assert (summary(p)["scored"], summary(p)["skipped"]) == (0, 3)


SAME_AUDIO_SCORE = 1e-6  # one clip's bytes, read from a file or from its shard: one score


def test_archive_shards_score_as_their_files_do(tmp_path, write_manifest):
    rows = [{"id": k, "text": f"line {k}", "seed": n} for n, k in enumerate(["a", "b.1", "c"])]
    manifest = write_manifest(rows)
    scores = {}
    for layout in ("files", "webdataset", "parquet"):
        out = tmp_path / layout
        made = run("batch", manifest, "-o", out, "--speaker", "ryan", "--output", layout,
                   "--shard-rows", 2)  # fmt: skip
        assert made.returncode == 0, made.stderr
        p = run("score", out)
        assert p.returncode == 0 and summary(p)["scored"] == 3, p.stderr
        table = pq.read_table(out / "results.parquet", columns=["id", "dnsmos_ovrl"])
        scores[layout] = dict(zip(*table.to_pydict().values(), strict=True))
    for layout in ("webdataset", "parquet"):
        assert scores[layout].keys() == scores["files"].keys()
        for k, want in scores["files"].items():
            assert abs(scores[layout][k] - want) <= SAME_AUDIO_SCORE, (layout, k)


BLOCK_SPEECHMOS = """
import sys
class NoQuality:
    def find_spec(self, name, path=None, target=None):
        if name == "speechmos":
            raise ImportError("No module named 'speechmos'")
sys.meta_path.insert(0, NoQuality())
sys.argv = ["qtts", "score", sys.argv[1]]
from qtts.cli.app import main
main()
"""


def test_a_missing_extra_is_one_line_naming_the_install(tmp_path):
    p = subprocess.run([sys.executable, "-c", BLOCK_SPEECHMOS, str(tmp_path)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        "Error: qtts score needs the quality extra (speechmos is missing: No module named "
        "'speechmos'); install it with: pip install \"qtts[quality]\" (from a clone: "
        'pip install -e ".[quality]")'
    ]


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d / "nope", "is not a folder"),
        (lambda d: d, "holds neither a qtts job (.qtts/job.json) nor an AudioFolder"),
        (
            lambda d: (d / "metadata.jsonl").write_text('{"file_name": "a.wav"}\n') and d,
            "has no text",
        ),
    ],
)
def test_a_path_that_is_no_dataset_is_a_usage_error(tmp_path, make, says):
    p = run("score", make(tmp_path))
    assert p.returncode == 2 and says in p.stderr and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1


def test_a_silent_or_corrupt_clip_fails_speaker_scoring_alone(folder, tmp_path):
    """Speaker similarity (resemblyzer, the default) on an AudioFolder with a silent clip and a
    corrupt one: each fails alone with its reason on stderr and in `error` (exit 3); the speech
    rows are scored and share one voice's centroid."""
    import numpy as np
    import soundfile as sf

    data = copy_folder(folder, tmp_path / "data")
    sf.write(str(data / "silent.wav"), np.zeros(24_000, np.float32), 24_000)
    lines = [json.loads(line) for line in (data / "metadata.jsonl").read_text().splitlines()]
    lines.append({"file_name": "silent.wav", "text": "nothing"})
    for line in lines:
        line["speaker"] = "espeak"
    (data / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    p = run("score", data, "--no-dnsmos")
    assert p.returncode == 3, p.stderr
    s = summary(p)
    assert (s["rows"], s["failed"]) == (6, 2) and s["stats"]["speaker_sim_centroid"]["n"] == 4
    assert "silent.wav: speaker: ValueError: silent clip: no voice to embed" in p.stderr
    assert "corrupt.wav: unreadable audio: " in p.stderr
    rows = by_name(data)
    assert rows["silent.wav"]["speaker_sim_centroid"] is None
    assert all(rows[n]["error"] is None and rows[n]["speaker_sim_centroid"] for n in SPEECH)


def test_an_out_dirs_base_rows_score_against_their_reference_and_voice(tmp_path, write_manifest):
    """Plumbing of an out dir's voices: Base rows (the fake model's sine, cloned from espeak-ng
    clips) get speaker_sim against the reference each row names, and the centroid of the rows
    that share a reference clip; the views carry both."""
    speak(SENTENCES["speech1.wav"], tmp_path / "a.wav")
    speak(SENTENCES["speech2.wav"], tmp_path / "b.wav", "en-us+m7")
    rows = [{"id": f"c{i}", "text": f"clone {i}", "ref_audio": "a.wav" if i < 2 else "b.wav",
             "ref_text": "words"} for i in range(3)]  # fmt: skip
    out = tmp_path / "out"
    assert run("batch", write_manifest(rows), "-o", out, "--model", "fake-base").returncode == 0
    p = run("score", out, "--no-dnsmos")
    assert p.returncode == 0 and summary(p)["scored"] == 3, p.stderr
    table = pq.read_table(out / "results.parquet").to_pylist()
    assert all(-1 <= r["speaker_sim"] <= 1 for r in table)
    centroid = [r["speaker_sim_centroid"] for r in table]
    assert centroid[2] == pytest.approx(1.0)  # alone with its reference clip: its own mean
    assert centroid[0] == pytest.approx(centroid[1]) and centroid[0] < 1.0
