"""Shared by the parity tests: where the official-code fixtures live and how one case is checked."""

import json
from pathlib import Path

import numpy as np

from qtts.core.synthesis.requests import GenerationOptions, Utterance

GOLDEN = Path(__file__).parent / "fixtures" / "golden"

# Named tolerances for comparisons against fixtures made by the official code on another machine.
# fp32 rounding differs between CPUs (AVX2 vs AVX-512 kernels, FFT and GEMM blocking) and between
# library releases, so no float is compared bit for bit; token codes always are.
#
# Decoded audio in [-1, 1]: 1e-4 is about three steps of 16-bit PCM, far below anything audible,
# and a real defect (a wrong chunk boundary, a missing layer) moves samples by 1e-2 or more.
# Seen: <= 2.8e-6 on an AVX2-only x86-64 box, with default and with ATEN_CPU_CAPABILITY=default.
AUDIO_ATOL = 1e-4
# The speech decoder alone, on the fixtures' own codes (no talker in front of it): seen <= 2.8e-6;
# 1e-5 keeps 3.5x headroom and still sees a single flipped rounding mode in a conv.
DECODER_ATOL = 1e-5
# Natural-log mel energies: an absolute error e is a relative error e in a bin's energy. fp32 FFT
# rounding is relative to the frame's loudest bins, so quiet bins carry the most; seen 3.9e-5 on
# an AVX2-only CPU against fixtures made on another. A wrong window or pad is off by > 1e-1.
LOG_MEL_ATOL = 5e-4
# x-vector (speaker embedding, |x| up to ~25): compared relative to its largest component. Seen
# 3.8e-7 relative (9.5e-6 absolute with ATEN_CPU_CAPABILITY=default); its input is the log-mel.
X_VECTOR_RTOL = 1e-5
# The Slaney filterbank is float64 math (numpy log/exp, whose SIMD versions differ by CPU)
# rounded to float32: at most one float32 ulp may move, plus one for luck.
FILTERBANK_MAX_ULP = 2


def golden_file(*parts: str) -> Path:
    """A committed fixture; a missing one fails loudly (at collection, for parametrized cases)
    instead of skipping, so a checkout without them can never go green."""
    path = GOLDEN.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(
            f"golden fixture missing: {path} (committed with the repo; tools/oracle/README.md "
            "says how to regenerate it with the official code)"
        )
    return path


def golden_cases(name: str) -> list[dict]:
    """The case list of a fixture set ("cases.json" or "base_cases.json")."""
    return json.loads(golden_file(name).read_text())


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


def assert_close_relative(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    """max |got - want| <= rtol * max |want| (a scale-aware bound for an embedding vector)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    err, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    assert err <= rtol * scale, f"{what}: max |err| {err:.3g} > {rtol:g} x {scale:.3g}"
