"""torch.library.opcheck over every qtts custom op on CPU: the schema (declared mutations and
aliasing), the fake implementation against the real one (shapes, dtypes, strides), the autograd
registration, and tracing through AOT dispatch with dynamic shapes.

Ops are found by scanning the package source for their definitions, so a new op without samples
in op_samples.py fails here. The sampler has no torch twin behind its op: it runs its kernel
under TRITON_INTERPRET=1, which triton reads at its first import, so in a subprocess.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch
from op_samples import SAMPLES
from torch.library import opcheck

import qtts.core
import qtts.kernels

DTYPES = (torch.float32, torch.bfloat16)
KNOWN = {"qtts::rms_norm", "qtts::silu_mul", "qtts::snake_beta", "qtts::qk_norm_rope_cache",
         "qtts::qk_norm_rope_prefill", "qtts::decode_attention", "qtts::prefill_attention",
         "qtts::sample_tokens"}  # fmt: skip
INTERPRETED_ONLY = {"qtts::sample_tokens"}
_DEFINITION = re.compile(r"""(?:custom_op|\.define)\(\s*["'](qtts::\w+)""")


def defined_ops() -> dict[str, str]:
    """qtts op -> the module defining it, from the source of qtts.kernels and qtts.core."""
    found = {}
    for package in (qtts.kernels, qtts.core):
        root = pathlib.Path(package.__path__[0])
        for path in sorted(root.rglob("*.py")):
            for op in _DEFINITION.findall(path.read_text()):
                parts = path.relative_to(root).with_suffix("").parts
                found[op] = ".".join((package.__name__, *parts))
    return found


def _op(name: str) -> torch._ops.OpOverload:
    namespace, op = name.split("::")
    return getattr(getattr(torch.ops, namespace), op).default


def test_every_qtts_op_is_registered_and_has_samples():
    defined = defined_ops()
    for module in set(defined.values()):
        importlib.import_module(module)
    registered = {n for n in torch._C._dispatch_get_all_op_names() if n.startswith("qtts::")}
    assert KNOWN <= set(defined), f"definitions not found: {KNOWN - set(defined)}"
    assert registered == set(defined), f"registered {registered}, defined {set(defined)}"
    assert set(SAMPLES) == set(defined), f"ops without samples: {set(defined) - set(SAMPLES)}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(set(SAMPLES) - INTERPRETED_ONLY))
def test_opcheck(name, dtype):
    importlib.import_module(defined_ops()[name])
    for args in SAMPLES[name](dtype, grad=False):
        opcheck(_op(name), args)


@pytest.mark.parametrize("name", sorted(set(SAMPLES) - INTERPRETED_ONLY))
def test_opcheck_autograd_registration(name):
    """With inputs that require grad. Only this check: the ops are inference-only (no autograd
    formula), so the AOT dispatch check, which runs backward, rightly raises for them."""
    importlib.import_module(defined_ops()[name])
    for args in SAMPLES[name](torch.float32, grad=True):
        opcheck(_op(name), args, test_utils="test_autograd_registration")


_INTERPRETED = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import qtts.kernels.sampling as ks
from op_samples import SAMPLES
from torch.library import opcheck
assert ks.INTERPRETED, "TRITON_INTERPRET=1 did not reach triton"
op, results = torch.ops.qtts.sample_tokens.default, {}
for dtype in (torch.float32, torch.bfloat16):
    for i, args in enumerate(SAMPLES["qtts::sample_tokens"](dtype, grad=False)):
        results[f"{dtype}/{i}"] = opcheck(op, args)
    for i, args in enumerate(SAMPLES["qtts::sample_tokens"](dtype, grad=True)):
        results[f"{dtype}/{i}/grad"] = opcheck(op, args, test_utils="test_autograd_registration")
json.dump(results, sys.stdout)
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_opcheck_sample_tokens_interpreted():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    here = str(pathlib.Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", _INTERPRETED, here], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout)
    assert len(results) == 8
    for case, checks in results.items():
        assert set(checks.values()) == {"SUCCESS"}, f"{case}: {checks}"
