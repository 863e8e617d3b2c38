"""tools/vocoder_probe.py's last-conv rows time the same arithmetic: the conv padded to 8 output
channels (zero filters) gives the built conv's audio in its first channel. Timing is for a GPU;
this checks only that the padded variant computes what it claims (its own assert_close)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from qtts.core.model.codec import SpeechDecoder
from qtts.core.model.sizes import decoder_config

REPO = Path(__file__).resolve().parents[3]


def _probe():
    spec = importlib.util.spec_from_file_location("probe", REPO / "tools" / "vocoder_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_padded_last_conv_is_the_built_one(monkeypatch):
    probe = _probe()
    monkeypatch.setattr(probe, "FRAMES", 4)
    torch.manual_seed(0)
    decoder = SpeechDecoder(decoder_config("small"))
    with torch.no_grad():
        decoder.decoder[-1].conv.bias.fill_(0.3)  # a bias the padding must keep in channel 0
        as_built, padded = probe.last_conv_rows(decoder, rows=2, repeats=1)
    assert as_built > 0 and padded > 0
