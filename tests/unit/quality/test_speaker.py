"""Speaker similarity as `qtts score` measures it: resemblyzer's GE2E re-run from its wheel's
weights equals resemblyzer's own code, tells one espeak-ng voice from another (real weights:
a quality check), the same clip against itself scores 1, the three model kinds run one path
(the tiny Base checkpoint and the tiny WavLMForXVector have random weights: plumbing only), and
the centroid score finds the row made with another voice among rows of one voice."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pyarrow.parquet as pq
import pytest
from speech import SENTENCES, speak

from qtts.core.quality.audio import read_clip
from qtts.core.quality.score_pass import ScoreOptions, score_path
from qtts.core.quality.speaker import centroid_sims

SAME_CLIP = 1e-5  # a clip against itself: the cosine of one vector with itself
VOICE_MARGIN = 0.03  # one voice on two sentences above two voices on two sentences
# Sentences of 3 to 4 s: a shorter clip gives GE2E fewer 1.6 s windows and a noisier embedding.
ONE, TWO, THREE = SENTENCES.values()


def _ge2e():
    pytest.importorskip("_webrtcvad")
    from qtts.core.quality.ge2e import Ge2e

    try:
        return Ge2e("cpu")
    except ModuleNotFoundError:
        pytest.skip("resemblyzer is not installed (the quality extra)")


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    """{(voice, sentence): 16 kHz clip} for espeak-ng's en-us and en-us+m7."""
    root = tmp_path_factory.mktemp("voices")
    clips = {}
    for voice in ("en-us", "en-us+m7"):
        for k, text in enumerate((ONE, TWO)):
            path = speak(text, root / f"{voice}-{k}.wav", voice)
            clips[voice, k] = read_clip(path).audio
    return clips


def test_ge2e_equals_resemblyzers_own_code(voices, monkeypatch):
    """resemblyzer imported as it is, its webrtcvad (which needs pkg_resources) stood in for by
    the same C extension: its embeddings and ours agree."""
    model = _ge2e()
    import _webrtcvad

    class Vad:
        def __init__(self, mode=None):
            self.vad = _webrtcvad.create()
            _webrtcvad.init(self.vad)
            _webrtcvad.set_mode(self.vad, mode)

        def is_speech(self, buf, sample_rate, length=None):
            return _webrtcvad.process(self.vad, sample_rate, buf, length or len(buf) // 2)

    monkeypatch.setitem(sys.modules, "webrtcvad", types.SimpleNamespace(Vad=Vad))
    for name in [m for m in sys.modules if m.startswith("resemblyzer")]:
        monkeypatch.delitem(sys.modules, name)
    from resemblyzer import VoiceEncoder, preprocess_wav

    theirs = VoiceEncoder("cpu", verbose=False)
    clips = list(voices.values())
    ours = model.embed(clips)
    for clip, vector in zip(clips, ours, strict=True):
        np.testing.assert_allclose(vector, theirs.embed_utterance(preprocess_wav(clip)), atol=1e-5)


def test_one_voice_on_two_sentences_scores_above_two_voices(voices):
    """Real weights, so this is about quality: espeak-ng's en-us against itself on two sentences,
    and against en-us+m7 on the other sentence (never the same words: they would lift both)."""
    e = dict(zip(voices, _ge2e().embed(list(voices.values())), strict=True))
    same = min(float(e["en-us", 0] @ e["en-us", 1]), float(e["en-us+m7", 0] @ e["en-us+m7", 1]))
    other = max(float(e["en-us", 0] @ e["en-us+m7", 1]), float(e["en-us+m7", 0] @ e["en-us", 1]))
    assert same >= other + VOICE_MARGIN, (same, other)


def _folder(root, rows: list[dict]):
    with open(root / "metadata.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return root


def _scores(root) -> dict[str, dict]:
    return {r["file_name"]: r for r in pq.read_table(root / "scores.parquet").to_pylist()}


def test_the_same_clip_twice_scores_one_and_the_centroid_finds_the_other_voice(tmp_path):
    _ge2e()
    sentences = [ONE, TWO, THREE, "Speech quality is judged on every row of the dataset."]
    rows = []
    for k, text in enumerate(sentences):
        voice = "en-us+m7" if k == 3 else "en-us"  # row 3: another voice, labelled the same
        speak(text, tmp_path / f"r{k}.wav", voice)
        rows.append({"file_name": f"r{k}.wav", "text": text, "speaker": "anna",
                     "ref_audio": "r0.wav"})  # fmt: skip
    summary = score_path(_folder(tmp_path, rows), ScoreOptions(dnsmos=False))
    assert (summary["scored"], summary["failed"]) == (4, 0)
    got = _scores(tmp_path)
    assert abs(got["r0.wav"]["speaker_sim"] - 1.0) <= SAME_CLIP  # its own reference
    assert got["r0.wav"]["speaker_scorer"].startswith("speaker:resemblyzer-")
    centroid = {n: r["speaker_sim_centroid"] for n, r in got.items()}
    assert min(centroid, key=centroid.get) == "r3.wav", centroid
    assert min(v for n, v in centroid.items() if n != "r3.wav") > centroid["r3.wav"] + 0.02
    assert got["r3.wav"]["speaker_sim"] < min(got[f"r{k}.wav"]["speaker_sim"] for k in (1, 2))
    again = score_path(tmp_path, ScoreOptions(dnsmos=False))  # resumed: nothing embedded again
    assert (again["scored"], again["skipped"]) == (0, 4) and _scores(tmp_path) == got


@pytest.mark.parametrize("kind", ["qwen3-base", "xvector"])
def test_the_base_encoder_and_an_xvector_model_run_the_same_path(tmp_path, kind):
    """Random weights (a tiny Base checkpoint's ECAPA-TDNN, a tiny WavLMForXVector): this proves
    the plumbing only. Each loads through --speaker-model DIR, embeds every row, names itself in
    speaker_scorer, scores a clip against itself 1, and a rerun skips."""
    if kind == "qwen3-base":
        from qtts.core.tiny.checkpoint import make_tiny_checkpoint

        model = make_tiny_checkpoint(tmp_path / "model", model_type="base")
    else:
        from qtts.core.tiny.xvector import make_tiny_xvector

        model = make_tiny_xvector(tmp_path / "model")
    data = tmp_path / "data"
    data.mkdir()
    for k, text in enumerate((ONE, TWO)):
        speak(text, data / f"r{k}.wav")
    rows = [{"file_name": f"r{k}.wav", "text": "x", "speaker": "a", "ref_audio": "r0.wav"}
            for k in range(2)]  # fmt: skip
    options = ScoreOptions(dnsmos=False, speaker_model=str(model))
    assert score_path(_folder(data, rows), options)["scored"] == 2
    got = _scores(data)
    assert got["r0.wav"]["speaker_scorer"].startswith(f"speaker:{kind}:")
    assert abs(got["r0.wav"]["speaker_sim"] - 1.0) <= SAME_CLIP
    assert all(-1 <= r["speaker_sim_centroid"] <= 1 + SAME_CLIP for r in got.values())
    assert score_path(data, options)["scored"] == 0
    if kind == "xvector":  # other weights are another scorer: every row is embedded again
        from qtts.core.tiny.xvector import make_tiny_xvector

        other = make_tiny_xvector(tmp_path / "other", seed=1)
        again = ScoreOptions(dnsmos=False, speaker_model=str(other))
        assert score_path(data, again)["scored"] == 2
        scorers = {r["speaker_scorer"] for r in _scores(data).values()}
        assert len(scorers) == 1 and scorers != {got["r0.wav"]["speaker_scorer"]}


def test_centroid_sims_group_by_voice_and_leave_the_unknown_out():
    import pyarrow as pa

    vectors = np.array([[1, 0], [1, 0.1], [0, 1], [0, 1], [1, 1]], dtype=np.float32)
    voices = pa.array(["a", "a", "b", "b", None])
    have = np.array([True, True, True, False, True])
    sims = centroid_sims(vectors, voices, have)
    assert sims[2] == pytest.approx(1.0) and sims[3] is None and sims[4] is None
    assert sims[0] == pytest.approx(sims[1]) and 0.99 < sims[0] < 1.0
