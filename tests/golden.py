"""Shared by the parity tests: where the official-code fixtures live and how one case is checked."""

from pathlib import Path

import numpy as np

from qtts.core.requests import GenerationOptions, Utterance

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
AUDIO_ATOL = 1e-4  # fp32 CPU; the official decoder runs the same ops


def greedy_utterances(text_model, synth, requests) -> dict[str, Utterance]:
    """Run `requests` with the fixture checkpoint's own generation_config, which is greedy
    (its repetition penalty, 1.05, still applies as in the official greedy path)."""
    d = text_model.defaults
    assert not d.talker.do_sample and not d.subtalker.do_sample
    return {u.id: u for u in synth.synthesize(requests, GenerationOptions(d.talker, d.subtalker))}


def assert_matches_case(got: dict, expected: np.lib.npyio.NpzFile, n: int, atol=AUDIO_ATOL):
    """Row i (id str(i)) against codes_i / audio_i: codes exact, same length, audio within atol."""
    for i in range(n):
        utt = got[str(i)]
        assert isinstance(utt, Utterance), utt
        want = expected[f"codes_{i}"]
        assert utt.codes.shape == want.shape, f"row {i}: frames differ"
        np.testing.assert_array_equal(utt.codes, want, err_msg=f"row {i}: codes differ")
        audio = expected[f"audio_{i}"]
        assert utt.audio.shape == audio.shape, f"row {i}: audio length differs"
        np.testing.assert_allclose(utt.audio, audio, atol=atol, rtol=0, err_msg=f"row {i}")
