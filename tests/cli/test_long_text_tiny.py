"""A long row on the real engine (tiny random checkpoint, CPU, sampling on): the job's file is its
segments' audio plus the pauses, its codes are the segments' codes, and neither depends on the
rows around it (each segment's seed comes from the row's)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.jobs.work.chunks import REQUEST_FIELDS, chunk_requests
from qtts.core.synthesis.requests import GenerationOptions

LONG = " ".join(f"Paragraph sentence {i} talks about the weather, the hills and the sea."
                for i in range(30))  # fmt: skip
STEPS = 6  # --max-new-tokens: the random model never stops, every segment makes 5 frames
SPLIT = SplitOptions(max_segment_tokens=300)  # the tiny tokenizer: about a token per letter


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", seed=3)


@pytest.fixture(autouse=True)
def real_model(monkeypatch):
    monkeypatch.delenv("QTTS_FAKE_SYNTH", raising=False)


def _job(checkpoint, rows, out, write_manifest, name) -> dict:
    m = write_manifest(rows, name=name)
    r = CliRunner().invoke(app, ["batch", str(m), "-o", str(out), "--model", str(checkpoint),
                                 "--device", "cpu", "--speaker", "vivian", "--save-codes",
                                 "--max-new-tokens", str(STEPS), "--max-segment-tokens",
                                 str(SPLIT.max_segment_tokens), "-q"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["ok"] == len(rows)
    return {x["id"]: x for x in pq.read_table(out / "results.parquet").to_pylist()}


@pytest.mark.slow
def test_a_long_row_is_its_segments_joined_whatever_rows_surround_it(checkpoint, tmp_path,
                                                                     write_manifest):  # fmt: skip
    assert len(LONG) > 2000
    target = {"id": "long", "text": LONG, "seed": 42}
    others = [{"id": f"o{i}", "text": t, "seed": i} for i, t in
              enumerate(["Hello there.", LONG[:700], "A third, short row."])]  # fmt: skip
    alone = _job(checkpoint, [target], tmp_path / "alone", write_manifest, "a.parquet")["long"]
    _job(checkpoint, [others[0], target, *others[1:]], tmp_path / "crowd", write_manifest,
         "b.parquet")  # fmt: skip
    codes = np.load(tmp_path / "alone" / "long.codes.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "crowd" / "long.codes.npy"), codes)
    # The vocoder decodes in padded batches: the audio may differ in rounding, never more.
    crowd_audio, _ = sf.read(tmp_path / "crowd" / "long.wav", dtype="float32")
    alone_audio, _ = sf.read(tmp_path / "alone" / "long.wav", dtype="float32")
    np.testing.assert_allclose(crowd_audio, alone_audio, atol=4 / 32768)

    # The same segment requests, synthesized directly in one batch: the file is their audio
    # with a pause between each two, the codes theirs one after another.
    from qtts.core.synthesis.requests import Placement
    from qtts.core.synthesis.session import load_synthesizer, open_text_model

    text_model = open_text_model(str(checkpoint))
    state = pq.read_table(tmp_path / "alone" / ".qtts" / "state.parquet")
    chunk = chunk_requests(state.select(list(REQUEST_FIELDS)), text_model,
                           FrameBudget(8192, STEPS), SPLIT)  # fmt: skip
    assert len(chunk.requests) == alone["segments"] > 4
    synth = load_synthesizer(text_model, Placement(device="cpu", dtype="float32"))
    d = text_model.defaults
    options = GenerationOptions(d.talker, d.subtalker)
    parts = {u.id: u for u in synth.synthesize(chunk.requests, options)}
    order = [parts[f"long\x1f{k}"] for k in range(len(parts))]
    np.testing.assert_array_equal(codes, np.concatenate([u.codes for u in order]))
    pause = round(0.25 * text_model.sample_rate)
    assert alone["segment_frames"] == [len(u.codes) for u in order]
    assert alone["num_samples"] == sum(len(u.audio) for u in order) + pause * (len(order) - 1)
    assert len(alone_audio) == alone["num_samples"]
    n0 = len(order[0].audio)
    np.testing.assert_allclose(alone_audio[:n0], np.clip(order[0].audio, -1, 1), atol=4 / 32768)
    assert not alone_audio[n0 : n0 + pause].any()


def test_a_word_too_long_to_cut_fails_alike_in_dry_run_and_run(checkpoint, tmp_path,
                                                                write_manifest):  # fmt: skip
    """--split finds no cut in one 40,000-letter word (over the tiny model's 32,768 positions):
    the dry run counts the row failed, with the reason the run then records."""
    m = write_manifest([{"id": "word", "text": "x" * 40_000}, {"id": "fine", "text": "Hello."}])
    out = tmp_path / "out"
    run = ["batch", str(m), "-o", str(out), "--model", str(checkpoint), "--device", "cpu",
           "--speaker", "vivian", "--max-new-tokens", str(STEPS), "-q"]  # fmt: skip
    dry = CliRunner().invoke(app, [*run, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    planned = json.loads(dry.stdout.strip().splitlines()[-1])
    assert (planned["failed"], planned["to_synthesize"]) == (1, 1)
    [failure] = planned["first_failures"]
    assert failure["id"] == "word" and "a word this long stays whole" in failure["error"]
    done = CliRunner().invoke(app, run)
    assert done.exit_code == 3, done.output
    results = {x["id"]: x for x in pq.read_table(out / "results.parquet").to_pylist()}
    assert results["word"]["error"] == failure["error"] and results["fine"]["status"] == "ok"
