"""Every Triton kernel compiles for sm_80 (A100) and sm_90 (H100) without a GPU, at the launches
its launcher makes for the published model sizes, with no register spills and registers within
the hardware's limits. ptxas comes from the triton wheel, so this runs on CPU-only CI.

A spill moves values to local memory (DRAM, through L1): it costs bandwidth on every access and
usually means a block grew past what a program can hold. Numbers per launch are in the message.
"""

from __future__ import annotations

import os

import pytest

# The build reads triton's argument binding (gpu_build.py), which changes between minors.
pytest.importorskip("triton", minversion="3.9", reason="no triton: nothing to compile")

from gpu_build import build  # noqa: E402
from kernel_launches import CASES, Launch, capture, discover_kernels  # noqa: E402

ARCHS = (80, 90)
MAX_REGISTERS = 255  # per thread, the ISA's limit on sm_80 and sm_90
REGISTER_FILE = 65536  # 32-bit registers per SM: a program needs registers * threads of them
KNOWN = {
    "_rms_norm_kernel",
    "_silu_mul_kernel",
    "_snake_beta_kernel",
    "_qk_norm_rope_cache_kernel",
    "_sample_kernel",
}

pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="TRITON_INTERPRET=1: the kernels are interpreted, not compiled"),
    # The launch path compiles with the same unset default; the warning is about a later release.
    pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset"),
]  # fmt: skip


def test_every_kernel_has_launches_at_model_sizes():
    kernels = discover_kernels()
    assert KNOWN <= set(kernels), f"kernels not found: {KNOWN - set(kernels)}"
    launched = {launch.kernel.fn.__name__ for label in CASES for launch in capture(label)}
    assert launched == set(kernels), (
        f"kernels without a case in kernel_launches.CASES: {set(kernels) - launched}"
    )


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("triton_cache"))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("label", list(CASES))
def test_kernel_compiles_without_spills(label, arch, cache_dir):
    launches = capture(label)
    assert launches, f"{label} launched nothing"
    for launch in launches:
        got = build(launch, arch, cache_dir)
        where = f"{label} ({launch.kernel.fn.__name__}) on sm_{arch}: {got}"
        print(where)  # the numbers, with -s or -rA
        assert got.spill_bytes == 0, f"{where}\n{got.log}"
        assert got.registers <= MAX_REGISTERS, where
        assert got.registers * got.threads <= REGISTER_FILE, where


def test_a_spill_is_seen(cache_dir):
    """The check can fail: a row of 8192 in one warp leaves 256 floats to each thread."""
    launch = capture("rms_norm/0.6b")[0]
    oversized = {**launch.kwargs, "BLOCK": 8192, "num_warps": 1}
    got = build(Launch(launch.kernel, launch.args, oversized), 80, cache_dir)
    assert got.spill_bytes > 0, got


def test_the_samplers_noise_takes_an_accurate_log(cache_dir):
    """The Gumbel noise -log(-log(u)) needs log(u) accurate next to 1 (u up to 1 - 2^-24, whose
    log is -6e-8): a fast log (lg2.approx, about 2^-22 off) would give 0 there, +inf noise."""
    launch = next(x for label in CASES for x in capture(label)
                  if x.kernel.fn.__name__ == "_sample_kernel")  # fmt: skip
    ptx = build(launch, 90, cache_dir).ptx
    assert "lg2.approx" not in ptx and ptx.count(".entry") == 1
