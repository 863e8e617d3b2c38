"""The engine with the Triton sampling kernel (interpreted on CPU) == the engine with the twin.

The kernel runs in a subprocess: TRITON_INTERPRET must be set before triton is first imported.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("triton")

SCRIPT = """
import json, sys
from qtts.core.synthesis.requests import Placement
from qtts.core.synthesis.session import load_synthesizer, open_text_model
from qtts.core.synthesis.requests import GenerationOptions, Request
tm = open_text_model(sys.argv[1])
synth = load_synthesizer(tm, Placement(device="cpu", dtype="float32", batch_size=2))
opts = GenerationOptions(tm.defaults.talker, tm.defaults.subtalker)  # sampling on
reqs = [Request(f"r{i}", f"Row {i} text.", i + 1, "vivian", "english", None, seed=7 + i,
                max_new_tokens=4) for i in range(3)]
print(json.dumps({u.id: u.codes.tolist() for u in synth.synthesize(reqs, opts)}))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny", seed=9)


def _codes(checkpoint, **env):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(checkpoint)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **env})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return {k: np.array(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def test_engine_codes_same_with_kernel_and_twin(checkpoint):
    twin = _codes(checkpoint, QTTS_SAMPLER="torch")
    kernel = _codes(checkpoint, QTTS_SAMPLER="triton", TRITON_INTERPRET="1")
    assert set(twin) == {"r0", "r1", "r2"}
    for k in twin:
        assert twin[k].shape == (3, 16)
        np.testing.assert_array_equal(kernel[k], twin[k])
