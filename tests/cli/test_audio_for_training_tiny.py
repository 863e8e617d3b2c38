"""--sample-rate and --loudness on the real engine (a tiny random checkpoint, CPU, greedy): 16 kHz
and 22.05 kHz jobs in the files and WebDataset layouts read back at their rate by soundfile and by
webdataset, as long as the 24 kHz job's clips; a --loudness -23 job read by an independent
BS.1770 meter (libebur128, through pyebur128). The random weights speak noise: these tests prove
the plumbing (rates, lengths, gains, ceilings), not speech quality; loudness is measured on
noise as well as on speech."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from typer.testing import CliRunner

from qtts.cli.app import app

TEXTS = ["The first row.", "A second row, a little longer.", "Three."]
STEPS = 20  # --max-new-tokens: the random talker never stops, so every clip is 19 frames (1.5 s)
SAME_LENGTH = 0.01  # the bound: a resampled clip's seconds within 1% of the 24 kHz one's
LOUDNESS_LU = 0.5  # the bound for an independent meter on a normalized clip
MIN_METERED_S = 1.0  # clips this long are held to it


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny", seed=6)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    path = tmp_path_factory.mktemp("in") / "m.parquet"
    ids = [f"r{i}" for i in range(len(TEXTS))]
    pq.write_table(pa.table({"id": ids, "text": TEXTS}), path)
    return path


@pytest.fixture(autouse=True)
def real_model(monkeypatch):
    monkeypatch.delenv("QTTS_FAKE_SYNTH", raising=False)


def job(checkpoint, manifest, out, *extra) -> dict[str, dict]:
    args = ["batch", manifest, "-o", out, "--model", checkpoint, "--device", "cpu", "--speaker",
            "vivian", "--greedy", "--max-new-tokens", STEPS, "-q", *extra]  # fmt: skip
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["ok"] == len(TEXTS)
    return {x["id"]: x for x in pq.read_table(out / "results.parquet").to_pylist()}


def file_clips(out) -> dict[str, tuple[np.ndarray, int]]:
    """Each row's clip as soundfile reads its file."""
    return {p.stem: sf.read(p, dtype="float32") for p in sorted(out.glob("*.wav"))}


def tar_clips(out) -> dict[str, tuple[np.ndarray, int]]:
    """Each row's clip as the webdataset library hands its sample (decoded by soundfile)."""
    import webdataset as wds

    urls = sorted(str(p) for p in (out / "data").glob("*.tar"))
    clips = {}
    for sample in wds.WebDataset(urls, shardshuffle=False):
        meta = json.loads(sample["json"])
        audio, rate = sf.read(io.BytesIO(sample["wav"]), dtype="float32")
        assert meta["sample_rate"] == rate
        clips[meta["id"]] = (audio, rate)
    return clips


@pytest.mark.slow
def test_clips_at_16_and_22_05_khz_read_back_at_their_rate_and_length(checkpoint, manifest,
                                                                      tmp_path):  # fmt: skip
    job(checkpoint, manifest, tmp_path / "24k")
    base = {k: a.size / r for k, (a, r) in file_clips(tmp_path / "24k").items()}  # seconds
    assert len(base) == len(TEXTS) and min(base.values()) > 1.0
    for rate in (16_000, 22_050):
        for layout, read in (("files", file_clips), ("webdataset", tar_clips)):
            out = tmp_path / f"{layout}-{rate}"
            rows = job(checkpoint, manifest, out, "--sample-rate", rate, "--output", layout)
            clips = read(out)
            assert clips.keys() == base.keys(), layout
            for row_id, (audio, got) in clips.items():
                assert got == rate == rows[row_id]["sample_rate"], (layout, row_id)
                assert audio.size == rows[row_id]["num_samples"]
                assert abs(audio.size / rate - base[row_id]) <= SAME_LENGTH * base[row_id]


@pytest.mark.slow
def test_a_minus_23_lufs_job_reads_minus_23_on_an_independent_meter(checkpoint, manifest,
                                                                    tmp_path):  # fmt: skip
    import pyebur128

    out = tmp_path / "loud"
    rows = job(checkpoint, manifest, out, "--loudness", -23, "--sample-rate", 16_000)
    ceiling = 10 ** (-1 / 20)  # --peak-db's default
    metered = 0
    for row_id, (audio, rate) in file_clips(out).items():
        assert np.max(np.abs(audio)) <= ceiling, row_id
        if audio.size / rate < MIN_METERED_S:
            continue
        state = pyebur128.R128State(1, rate, pyebur128.MeasurementMode.MODE_I)
        state.add_frames(audio.astype(np.float64), audio.size)
        lufs = pyebur128.get_loudness_global(state)
        assert rows[row_id]["loudness_status"] == "normalized", rows[row_id]
        assert abs(lufs + 23.0) <= LOUDNESS_LU, (row_id, lufs)
        assert abs(rows[row_id]["loudness_lufs"] - lufs) <= LOUDNESS_LU
        metered += 1
    assert metered == len(TEXTS)
