"""Speech-tokenizer decoder vs the official decode, on the committed golden fixtures.

The fixtures (tests/fixtures/golden, made by tools/oracle/make_golden.py with the official code)
hold a tiny speech tokenizer, `codec_long.npz` (three random utterances of 700, 350 and 40 frames
decoded in ONE official call: exercises 300-frame chunks, 25 frames of left context and batch
padding) and per-case audio decoded from the codes the official talker produced. Both decodes
are checked: the official chunking (core/model/codec.py) and the bucketed windows qtts runs
(core/engine/vocoder/vocoder_windows.py: padded frames, groups cut into powers of two).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from golden import DECODER_ATOL, GOLDEN, golden_file
from safetensors.torch import load_file

from qtts.core.engine.vocoder.vocoder_windows import decode_bucketed
from qtts.core.model.codec import SpeechDecoder, SpeechDecoderConfig, decode_utterances

TOKENIZER = GOLDEN / "speech_tokenizer"
TOL = DECODER_ATOL  # fp32 max |err| vs the official decode (named and justified in tests/golden.py)
DECODES = {"official-chunks": decode_utterances, "bucketed": decode_bucketed}


@pytest.fixture(scope="module")
def decoder() -> SpeechDecoder:
    cfg = SpeechDecoderConfig.from_dict(json.loads((TOKENIZER / "config.json").read_text()))
    weights = load_file(str(golden_file("speech_tokenizer", "model.safetensors")))
    state = {k.removeprefix("decoder."): v for k, v in weights.items() if k.startswith("decoder.")}
    model = SpeechDecoder(cfg).eval()
    model.load_state_dict(state, strict=True)
    return model.float()


def _max_err(ours: torch.Tensor, theirs: np.ndarray) -> float:
    assert ours.shape == theirs.shape, f"shape {tuple(ours.shape)} vs official {theirs.shape}"
    return float((ours - torch.from_numpy(theirs)).abs().max()) if theirs.size else 0.0


@pytest.mark.slow  # ~2M samples through the decoder: seconds on 2 CPUs
@pytest.mark.parametrize("decode", DECODES.values(), ids=DECODES.keys())
def test_long_chunked_batch_matches_official(decoder, decode):
    z = np.load(golden_file("codec_long.npz"))
    codes = [torch.from_numpy(z[f"codes_{i}"]) for i in range(len(z["num_samples"]))]
    audio = decode(decoder, codes)  # one batched call, like the official one
    assert [a.shape[0] for a in audio] == z["num_samples"].tolist()
    stride = int(z["stride"])
    for i, a in enumerate(audio):
        assert _max_err(a[::stride], z[f"sub_{i}"]) <= TOL, f"utterance {i} (subsampled)"
    for j, (u, start, end) in enumerate(z["windows"].tolist()):
        window = audio[u][start * 1920 : end * 1920]  # full resolution around a chunk boundary
        assert _max_err(window, z[f"win_{j}"]) <= TOL, f"window {j}: utterance {u} {start}-{end}"


def _cases() -> list[Path]:
    cases = sorted(golden_file("cases").glob("*.npz"))
    if not cases:
        raise FileNotFoundError(f"no golden cases in {GOLDEN / 'cases'}")
    return cases


@pytest.mark.parametrize("decode", DECODES.values(), ids=DECODES.keys())
@pytest.mark.parametrize("case", _cases(), ids=lambda p: p.stem)
def test_case_audio_matches_official(decoder, case: Path, decode):
    z = np.load(case)
    rows = sorted(int(k.split("_")[1]) for k in z.files if k.startswith("codes_"))
    codes = [torch.from_numpy(z[f"codes_{i}"]) for i in rows]
    audio = decode(decoder, codes)  # the official decoded each case's rows together
    for i, a in zip(rows, audio, strict=True):
        assert _max_err(a, z[f"audio_{i}"]) <= TOL, f"row {i}"
