"""tools/vocoder_probe.py runs end to end on a CPU under TRITON_INTERPRET=1 (the small decoder, one
frame, timing stubbed to one call): every variant decodes, each fused op's launch shapes give the
default's output (the probe's own assert_close before it times one), and the last line is JSON
with a figure per row. Timing itself is for a GPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

_SCRIPT = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("probe", sys.argv[1])
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
probe.FRAMES = 1
probe.UNIT_SHAPES = ([None, (64, 4)], [None, (32, 8)])
probe.TAIL_SHAPES = [None, (128, 4)]
probe.timed = lambda fn, repeats: (fn(), 1e-3)[1]
sys.argv = ["probe", "--size", "small", "--device", "cpu", "--rows", "2", "--dtype", "float32"]
probe.main()
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_the_probe_runs_every_row_on_cpu():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(REPO / "tools" / "vocoder_probe.py")],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])["ms"]
    labels = {k.strip() for k in figures}
    assert {"layers (SnakeBeta formula)", "+ units <= 192 (a job's)", "tail: layers"} <= labels
    # the small decoder's fused widths are 6 and 12: layers, then the default and one shape each
    for width, shape in ((6, "64 x 4"), (12, "32 x 8")):
        want = {"layers", "kernel default", f"kernel {shape} warps"}
        assert {f"unit {width}: {row}" for row in want} <= labels
    assert "job's kernels vs layers" in done.stdout
