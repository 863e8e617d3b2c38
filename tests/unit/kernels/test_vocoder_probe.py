"""tools/vocoder_probe.py runs end to end on a CPU (the small decoder, one frame, timing stubbed
to one call): every variant decodes alike, every convolution of the decoder gets a row three ways
(cuDNN's, channels-last, and the product's for every ungrouped one), each equal to cuDNN's, and
the last line is JSON with a figure per row. Timing itself is for a GPU."""

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
    nhwc = [k for k in labels if k.endswith(": channels-last")]
    products = {k.split(":")[0] for k in labels if k.endswith(": product")}
    # pre_conv, 2 upsampling stages (transposed + depthwise), the first conv, 4 blocks (transposed
    # + 3 units of 2 convs), the last conv
    assert len(convs) == len(nhwc) == 1 + 2 * 2 + 1 + 4 * (1 + 3 * 2) + 1
    # every ungrouped one as a product: all but the upsampling stages' depthwise convs
    assert len(products) == len(convs) - 2
    assert {"pre_conv", "decoder.0", "decoder.1.block.1", "decoder.6"} <= products
    assert "upsample.0.1.dwconv" not in products
    # each other way computes the same convolution (fp32 on a CPU: to rounding)
    last = json.loads(out.strip().splitlines()[-1])
    assert all(d < 1e-4 for d in last["conv_diffs"].values()), last["conv_diffs"]
    assert set(last["fastest_conv_way"].values()) <= {"cuDNN", "channels-last", "product"}
    assert "all convolutions: cuDNN" in out
