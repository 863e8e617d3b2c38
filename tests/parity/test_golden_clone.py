"""Voice clone (Base) vs the official generate_voice_clone, on the tiny Base checkpoint it built.

Greedy, fp32 CPU: codes exact and audio within AUDIO_ATOL through both generators, for x-vector
and ICL rows, single and batched, rows stopping at different steps (tools/oracle/clone_golden.py).
Also the front end alone: the mel filterbank, log-mel and x-vector, and the Mimi codes.
"""

from pathlib import Path

import numpy as np
import pytest
from golden import (
    FILTERBANK_MAX_ULP,
    GOLDEN,
    LOG_MEL_ATOL,
    X_VECTOR_RTOL,
    assert_close_relative,
    assert_matches_case,
    golden_cases,
    greedy_utterances,
)

from qtts.core.synthesis.requests import Request


def _cases() -> list[dict]:
    return golden_cases("base_cases.json")


@pytest.fixture(scope="module")
def base():
    from qtts.core.synthesis.requests import Placement
    from qtts.core.synthesis.session import load_synthesizer, open_text_model

    text_model = open_text_model(str(GOLDEN / "base"))
    return text_model, load_synthesizer(text_model, Placement(device="cpu", dtype="float32"))


def _requests(text_model, case: dict) -> list[Request]:
    out = []
    for i, row in enumerate(case["rows"]):
        _, lang, _, _ = text_model.normalize_row(None, row["language"], None)
        out.append(
            Request(
                id=str(i),
                text=row["text"],
                row=i + 1,
                language=lang,
                ref_audio=str(GOLDEN / row["ref_audio"]),
                ref_text=None if row["x_vector_only"] else row["ref_text"],
                max_new_tokens=case["max_new_tokens"],
            )
        )
    return out


@pytest.mark.parametrize("generator", ["engine", "naive"])
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_clone_matches_official(case, generator, base):
    text_model, synth = base
    synth.generator, synth.batch_size = generator, len(case["rows"])
    requests = _requests(text_model, case)
    got = greedy_utterances(text_model, synth, requests)
    expected = np.load(GOLDEN / "base_cases" / f"{case['name']}.npz")
    assert_matches_case(got, expected, len(requests))  # audio length: the reference cut
    assert sorted(case["num_frames"]) == sorted(int(u.codes.shape[0]) for u in got.values())


def test_reference_tokens_match_official(base):
    from qtts.core.synthesis.prompt import encode, reference_template

    text_model, _ = base
    for case in _cases():
        for row, want in zip(case["rows"], case["ref_ids"], strict=True):
            if want is not None:
                assert encode(text_model.tokenizer, reference_template(row["ref_text"])) == want


def test_front_end_matches_official(base):
    """Slaney filterbank, log-mel and x-vector within their named tolerances; Mimi codes exact."""
    import torch

    from qtts.core.model.speaker_encoder import log_mel, slaney_mel_filterbank, x_vector
    from qtts.core.synthesis.voice_clone import load_reference

    _, synth = base
    want = np.load(GOLDEN / "base_refs" / "refs.npz")
    np.testing.assert_array_max_ulp(slaney_mel_filterbank(), want["mel_basis"], FILTERBANK_MAX_ULP)
    for name in ("ref_a", "ref_b"):
        wav = load_reference(GOLDEN / "base_refs" / f"{name}.wav")
        mel = log_mel(torch.from_numpy(wav)).numpy()
        np.testing.assert_allclose(mel, want[f"mel_{name}"], atol=LOG_MEL_ATOL, rtol=0)
        xvec = x_vector(synth.model.speaker_encoder, wav).numpy()
        assert_close_relative(xvec, want[f"xvector_{name}"], X_VECTOR_RTOL, f"x-vector {name}")
        ref = synth.references.get(str(GOLDEN / "base_refs" / f"{name}.wav"), "some text")
        np.testing.assert_array_equal(ref.ref_code.numpy(), want[f"codes_{name}"])


@pytest.mark.parametrize("split", ["none", "auto"])
def test_qtts_batch_clones_end_to_end(tmp_path, write_manifest, monkeypatch, split):
    """`qtts batch` with ref_audio/ref_text columns on the Base checkpoint: ICL and x-vector rows
    give the official codes; a bad reference fails its row alone with a reason. The golden rows
    were made whole: with --split auto, those under the segment limit are made exactly so, and
    the one over it is split."""
    import shutil

    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from qtts.cli.app import app

    monkeypatch.delenv("QTTS_FAKE_SYNTH", raising=False)
    monkeypatch.delenv("QTTS_GENERATOR", raising=False)
    for name in ("ref_a.wav", "ref_b.wav"):
        shutil.copy(GOLDEN / "base_refs" / name, tmp_path / name)
    import soundfile as sf

    sf.write(str(tmp_path / "quiet.wav"), np.zeros(48000, np.float32), 24000)
    case = {c["name"]: c for c in _cases()}["base_batch"]
    rows = [
        {"id": f"r{i}", "text": r["text"], "language": r["language"],
         "ref_audio": Path(r["ref_audio"]).name,
         "ref_text": None if r["x_vector_only"] else r["ref_text"]}
        for i, r in enumerate(case["rows"])
    ]  # fmt: skip
    rows.append({"id": "silent", "text": "x", "language": "english", "ref_audio": "quiet.wav",
                 "ref_text": "t"})  # fmt: skip
    manifest = write_manifest(rows)
    out = tmp_path / "out"
    args = ["batch", manifest, "-m", GOLDEN / "base", "-o", out, "--device", "cpu", "--greedy",
            "--max-new-tokens", case["max_new_tokens"], "--save-codes", "-b", 2,
            "--split", split]  # fmt: skip
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 3, r.output  # finished, one row failed
    res = {x["id"]: x for x in pq.read_table(out / "results.parquet").to_pylist()}
    assert res["silent"]["status"] == "failed" and "silent" in res["silent"]["error"]
    want = np.load(GOLDEN / "base_cases" / "base_batch.npz")
    cut = 0
    for i in range(len(case["rows"])):
        assert res[f"r{i}"]["status"] == "ok", res[f"r{i}"]
        if res[f"r{i}"]["segments"] > 1:  # over the default limit of 50 tokens (54)
            assert split == "auto" and len(case["rows"][i]["text"]) == 80
            cut += 1
            continue
        np.testing.assert_array_equal(np.load(out / f"r{i}.codes.npy"), want[f"codes_{i}"])
        audio, sr = sf.read(out / f"r{i}.wav", dtype="float32")
        assert sr == 24000 and audio.shape == want[f"audio_{i}"].shape
        np.testing.assert_allclose(audio, want[f"audio_{i}"], atol=2 / 32768)  # 16-bit PCM
    assert (cut > 0) == (split == "auto")
