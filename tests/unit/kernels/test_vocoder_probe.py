"""tools/vocoder_probe.py runs end to end on a CPU (the small decoder, one frame, timing stubbed
to one call): every variant decodes alike, every convolution of the decoder gets a row (cuDNN's,
and the product's for the frame-rate ones), and the last line is JSON with a figure per row.
Timing itself is for a GPU."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_the_probe_runs_every_row_on_cpu(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("probe", REPO / "tools" / "vocoder_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    monkeypatch.setattr(probe, "FRAMES", 1)
    monkeypatch.setattr(probe, "timed", lambda fn, repeats: (fn(), 1e-3)[1])
    argv = ["probe", "--size", "small", "--device", "cpu", "--rows", "2", "--dtype", "float32"]
    monkeypatch.setattr(sys, "argv", argv)
    probe.main()
    out = capsys.readouterr().out
    labels = {k.strip() for k in json.loads(out.strip().splitlines()[-1])["ms"]}
    assert {"layers (SnakeBeta formula)", "+ frame-rate convs as products (a job's)"} <= labels
    assert "job's path vs layers: max |diff| 0.0000" in out  # a CPU runs the layers either way
    convs = [k for k in labels if k.endswith(": cuDNN")]
    products = [k for k in labels if k.endswith(": product")]
    # pre_conv, 2 upsampling stages (transposed + depthwise), the first conv, 4 blocks (transposed
    # + 3 units of 2 convs), the last conv
    assert len(convs) == 1 + 2 * 2 + 1 + 4 * (1 + 3 * 2) + 1
    assert sorted(p.split(":")[0] for p in products) == [
        "decoder.0", "decoder.1.block.1", "pre_conv", "upsample.0.0", "upsample.1.0",
    ]  # fmt: skip
