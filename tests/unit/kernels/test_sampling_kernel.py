"""The Triton sampling kernel == its torch twin (core/engine/step/token_choice.py),
TRITON_INTERPRET=1.

Triton fixes interpreter mode when it is first imported, process-wide, so the kernel runs in ONE
subprocess (started with TRITON_INTERPRET=1) over every case built here; this process computes
the twin and compares. Inputs are continuous random logits, so no top-p cut sits within float
rounding of a cumulative sum (the only place the two may round differently), and the seeds are
fixed, so each comparison is deterministic. One case (top_p_cut) puts a cumulative sum exactly on
the cut-off, with probabilities that are exact in float32, so the boundary itself is tested.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from qtts.core.engine.device.tuning import EngineTuning, sampler_on
from qtts.core.engine.step.token_choice import (
    RowParams,
    apply_penalties,
    choose_tokens,
    filter_top_k_top_p,
    select_tokens,
)

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")

_PARAMS = ("greedy", "temperature", "top_k", "top_p", "repetition_penalty")
_DTYPES = dict(
    greedy=torch.bool,
    temperature=torch.float32,
    top_k=torch.int64,
    top_p=torch.float32,
    repetition_penalty=torch.float32,
)

# Runs in the subprocess: every case through sample_tokens (or choose_tokens when asked).
_WORKER = r"""
import sys, torch
import qtts.kernels.sampling as ks
from qtts.core.engine.step.token_choice import RowParams, choose_tokens
assert ks.INTERPRETED, "TRITON_INTERPRET=1 did not reach triton"
PARAMS = ("greedy", "temperature", "top_k", "top_p", "repetition_penalty")
results = {}
for name, c in torch.load(sys.argv[1]).items():
    ks.SEARCH_BITS = c.get("search_bits", 4)
    kw = {k: c[k] for k in ("seen", "block_eos", "eos_id", "suppress")}
    try:
        if c.get("dispatch"):
            params = RowParams(**{k: c[k] for k in PARAMS})
            results[name] = choose_tokens(
                c["logits"], params, c["seeds"], c["frames"], c["codebook"], sampler="triton", **kw
            )
            continue
        out = torch.full((c["logits"].shape[0],), -1, dtype=torch.int64)
        kw.update({k: c[k] for k in PARAMS + ("seeds", "frames", "codebook")})
        results[name] = ks.sample_tokens(c["logits"], out, **kw).clone()
    except ValueError as e:
        results[name] = "ValueError: " + str(e)
torch.save(results, sys.argv[2])
"""


def _case(
    logits,
    *,
    seeds=None,
    frames=None,
    codebook=0,
    seen=None,
    block_eos=None,
    eos_id=-1,
    suppress=None,
    **params,
) -> dict:
    """One sampling call. params: each RowParams field, scalar or per-row."""
    b = logits.shape[0]
    base = dict(greedy=False, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0)
    base.update({k: v for k, v in params.items() if k in _PARAMS})
    case = {k: torch.as_tensor(v, dtype=_DTYPES[k]).expand(b).clone() for k, v in base.items()}
    case.update(
        logits=logits,
        codebook=codebook,
        seen=seen,
        block_eos=block_eos,
        eos_id=eos_id,
        suppress=suppress,
    )
    case["seeds"] = torch.arange(b) * 7919 + 11 if seeds is None else torch.as_tensor(seeds)
    case["frames"] = torch.arange(b) % 5 if frames is None else torch.as_tensor(frames)
    case.update({k: v for k, v in params.items() if k not in _PARAMS})  # search_bits, dispatch
    return case


def _randn(b, v, seed, scale=3.0):
    return torch.randn(b, v, generator=torch.Generator().manual_seed(seed)) * scale


def _mixed(v: int, seed: int) -> dict:
    """Eight rows, every parameter varying per row, penalties/EOS block/suppression on."""
    g = torch.Generator().manual_seed(seed + 1)
    suppress = torch.zeros(v, dtype=torch.bool)
    suppress[v - 9 : v - 1] = True  # the last id (EOS here) stays allowed
    return _case(
        _randn(8, v, seed),
        seen=torch.rand(8, v, generator=g) < 0.1,
        block_eos=torch.tensor([True, False] * 4),
        eos_id=v - 1,
        suppress=suppress,
        greedy=[True, False, False, False, False, False, True, False],
        temperature=[0.0, 0.7, 1.0, 1.3, 0.9, 2.0, 1.0, 0.5],
        top_k=[0, 0, 50, 1, 7, 0, 3, v + 5],
        top_p=[1.0, 0.9, 1.0, 0.8, 0.5, 0.3, 1.0, 0.95],
        repetition_penalty=[1.05, 1.5, 0.7, 1.0, 1.2, 1.05, 2.0, 1.1],
        codebook=seed % 16,
    )


def _only_eos() -> dict:
    logits = _randn(4, 300, 5)
    suppress = torch.ones(300, dtype=torch.bool)
    suppress[42] = False
    # Row 3 also blocks EOS: nothing is allowed, and both pick id 0 (argmax of all -inf).
    return _case(
        logits,
        suppress=suppress,
        block_eos=torch.tensor([False] * 3 + [True]),
        eos_id=42,
        greedy=[True, False, False, False],
        top_k=[0, 5, 0, 0],
        top_p=[1.0, 1.0, 0.5, 1.0],
    )


def _chi2_case() -> dict:
    logits = torch.tensor([[2.0, 1.5, 1.2, 1.0, 0.8, 0.5, 0.3, 0.0, -0.5, -1.0, -2.0, -3.0]])
    n = 360
    return _case(
        logits.expand(n, -1).contiguous(),
        seeds=torch.arange(n) * 104729 + (1 << 33),
        frames=torch.full((n,), 3),
        codebook=5,
        temperature=0.8,
        top_k=8,
        top_p=0.9,
    )


# The top-p cut-off hit exactly: four ids whose logits differ (by 1e-9, distinct float32 values)
# but whose exp rounds to 1.0, so each has probability 1/4 and the ascending cumulative sums are
# exactly 0.25, 0.5, 0.75, 1.0; the rest underflow to probability 0. HF top-p drops a position
# whose sum is <= 1 - top_p: at top_p 0.5 it drops two of the four, at 0.75 one.
TOP_P_IDS = [3, 17, 29, 8]  # highest logit first
TOP_P_KEPT = {0.5: {3, 17}, 0.75: {3, 17, 29}}


def _top_p_cut_case() -> dict:
    logits = torch.full((64, 37), -200.0)
    logits[:, TOP_P_IDS] = torch.tensor([0.0, -1e-9, -2e-9, -3e-9])
    return _case(logits, top_p=[0.5] * 32 + [0.75] * 32)


def _top_noise_case(kind: str) -> dict:
    """Rows at the (seed, frame, codebook, id) whose noise is highest (tests/unit/engine/
    test_sampling.py): even logits draw that id ("free"); filtered out, never: by top-k, top-p
    and the EOS block, a row each ("filtered"), or by suppression in every row ("suppressed")."""
    seed, top_id = 853901, 8
    logits = torch.arange(16.0).expand(3, -1) * 0.01  # near-even, no ties at any cut
    suppress = block = None
    top_k, top_p = [0, 0, 0], [1.0, 1.0, 1.0]
    if kind == "filtered":
        logits[:2, top_id] = -3.0  # below row 0's top-k cut and row 1's top-p cut
        block = torch.tensor([False, False, True])  # row 2: the id is EOS, blocked
        top_k, top_p = [4, 0, 0], [1.0, 0.5, 1.0]
    if kind == "suppressed":
        suppress = torch.zeros(16, dtype=torch.bool)
        suppress[top_id] = True
    return _case(logits.contiguous(), seeds=[seed] * 3, frames=[0] * 3, suppress=suppress,
                 block_eos=block, eos_id=top_id, top_k=top_k, top_p=top_p)  # fmt: skip


def _cases() -> dict:
    ties = torch.tensor([[5.0, 4.0, 4.0, 1.0, 4.0, 0.0, -1.0, 2.0]]).expand(24, -1).contiguous()
    mixed = _mixed(1000, 0)
    perm = torch.tensor([5, 2, 7, 0, 3, 3, 1, 6, 4])  # a reordered batch with a row twice
    shuffled = {
        k: (v[perm] if isinstance(v, torch.Tensor) and k != "suppress" else v)
        for k, v in mixed.items()
    }
    eos_first = _randn(6, 64, 9)
    eos_first[:, 63] = 50.0  # EOS would win everywhere unless blocked
    seen = torch.zeros(6, 200, dtype=torch.bool)
    seen[:, :100] = True
    cases = {
        "greedy": _case(
            _randn(8, 1000, 1),
            greedy=True,
            temperature=[0.0, 1.0, 1e-3, 10.0] * 2,
            seen=torch.rand(8, 1000, generator=torch.Generator().manual_seed(2)) < 0.3,
            repetition_penalty=1.3,
            top_k=3,
            top_p=0.2,
        ),
        "top_k_1": _case(_randn(8, 500, 3), top_k=1, temperature=1.7),
        "tiny_top_p": _case(_randn(8, 500, 4), top_p=1e-6),
        "cold": _case(_randn(8, 300, 6), temperature=1e-3),
        "hot": _case(_randn(8, 300, 7), temperature=10.0, top_k=[0, 20] * 4),
        "top_k_ties": _case(ties, top_k=2),
        "only_eos": _only_eos(),
        "repetition_penalty": _case(
            _randn(6, 200, 8, scale=1.0),
            seen=seen,
            repetition_penalty=[1.5, 0.7, 3.0, 1.0, 1.2, 0.5],
            temperature=0.5,
        ),
        "eos_block": _case(
            eos_first,
            block_eos=torch.tensor([True] * 3 + [False] * 3),
            eos_id=-1,
            greedy=[True, False] * 3,
        ),
        "mixed": mixed,
        "mixed_shuffled": shuffled,
        "radix_1": _mixed(37, 10) | {"search_bits": 1},
        "radix_4": _mixed(37, 10),
        "dispatch": _mixed(37, 11) | {"dispatch": True},
        "bad_dtype": _case(_randn(2, 10, 0)) | {"temperature": torch.ones(2, dtype=torch.float64)},
        "chi2": _chi2_case(),
        "top_p_cut": _top_p_cut_case(),
        "noise_top": _top_noise_case("free"),
        "noise_top_filtered": _top_noise_case("filtered"),
        "noise_top_suppressed": _top_noise_case("suppressed"),
    }
    for v in (2048, 3072, 37):
        cases[f"vocab_{v}"] = _mixed(v, v)
    return cases


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """(cases, kernel outputs by case name), from one interpreted subprocess."""
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    tmp = tmp_path_factory.mktemp("sampling_kernel")
    cases = _cases()
    torch.save(cases, tmp / "cases.pt")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _WORKER, str(tmp / "cases.pt"), str(tmp / "out.pt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"kernel subprocess failed:\n{proc.stderr[-4000:]}")
    return cases, torch.load(tmp / "out.pt")


def _twin(c: dict) -> torch.Tensor:
    scores = apply_penalties(
        c["logits"], c["repetition_penalty"], c["seen"], c["block_eos"], c["eos_id"], c["suppress"]
    )
    params = RowParams(**{k: c[k] for k in _PARAMS})
    return select_tokens(scores, params, c["seeds"], c["frames"], c["codebook"])


def _check(kernel, name) -> torch.Tensor:
    cases, outs = kernel
    assert isinstance(outs[name], torch.Tensor), outs[name]
    assert outs[name].tolist() == _twin(cases[name]).tolist()
    return outs[name]


@needs_triton
@pytest.mark.parametrize(
    "name",
    [
        "greedy",
        "top_k_1",
        "tiny_top_p",
        "cold",
        "hot",
        "top_k_ties",
        "repetition_penalty",
        "mixed",
        "vocab_2048",
        "vocab_3072",
        "vocab_37",
        "radix_1",
        "dispatch",
    ],
)
def test_kernel_matches_twin(kernel, name):
    _check(kernel, name)


@needs_triton
def test_greedy_and_degenerate_filters_are_the_argmax(kernel):
    cases, _ = kernel
    for name in ("greedy", "top_k_1", "tiny_top_p"):
        c = cases[name]
        scores = apply_penalties(c["logits"], c["repetition_penalty"], c["seen"], None, -1, None)
        assert _check(kernel, name).tolist() == scores.argmax(-1).tolist(), name


@needs_triton
def test_a_cumulative_sum_exactly_at_the_top_p_cut_off_is_dropped(kernel):
    """The boundary itself: a position whose cumulative probability equals 1 - top_p is dropped
    (HF's `<=`), by the kernel and the twin alike; every kept id is drawn by some seed."""
    tokens = _check(kernel, "top_p_cut")
    assert set(tokens[:32].tolist()) == TOP_P_KEPT[0.5]
    assert set(tokens[32:].tolist()) == TOP_P_KEPT[0.75]


@needs_triton
def test_ties_with_the_kth_value_are_kept(kernel):
    tokens = set(_check(kernel, "top_k_ties").tolist())
    assert tokens <= {0, 1, 2, 4} and len(tokens & {1, 2, 4}) >= 2


@needs_triton
def test_a_rows_tokens_depend_only_on_its_own_seed_and_frame(kernel):
    _, outs = kernel
    perm = torch.tensor([5, 2, 7, 0, 3, 3, 1, 6, 4])
    assert outs["mixed_shuffled"].tolist() == outs["mixed"][perm].tolist()
    assert outs["radix_1"].tolist() == outs["radix_4"].tolist()  # search width changes nothing


@needs_triton
def test_an_id_at_its_highest_noise_wins_unless_filtered_out(kernel):
    assert _check(kernel, "noise_top").tolist() == [8, 8, 8]
    assert 8 not in _check(kernel, "noise_top_filtered").tolist()
    assert 8 not in _check(kernel, "noise_top_suppressed").tolist()


@needs_triton
def test_eos_rules(kernel):
    assert _check(kernel, "only_eos").tolist() == [42, 42, 42, 0]
    blocked = _check(kernel, "eos_block")
    assert (blocked[:3] != 63).all() and (blocked[3:] == 63).all()


@needs_triton
def test_penalty_moves_seen_ids(kernel):
    cases, _ = kernel
    c = cases["repetition_penalty"]
    free = select_tokens(
        c["logits"], RowParams(**{k: c[k] for k in _PARAMS}), c["seeds"], c["frames"], 0
    )
    assert _check(kernel, "repetition_penalty").tolist() != free.tolist()


@needs_triton
def test_launcher_rejects_wrong_dtypes(kernel):
    _, outs = kernel
    assert isinstance(outs["bad_dtype"], str) and "temperature" in outs["bad_dtype"]


def _wilson_hilferty(dof: int, z: float = 3.09) -> float:
    """The chi-squared quantile at normal quantile z (3.09: p = 0.001)."""
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


@needs_triton
def test_sampled_tokens_follow_the_filtered_distribution(kernel):
    cases, outs = kernel
    c = cases["chi2"]
    tokens = outs["chi2"]
    assert tokens.tolist() == _twin(c).tolist()
    warped = c["logits"][:1] / c["temperature"][:1, None]  # as select_tokens computes it
    filtered = filter_top_k_top_p(warped, c["top_k"][:1], c["top_p"][:1])[0]
    probs = filtered.double().softmax(-1)  # [V]: the distribution the draw must follow
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    kept = probs > 0
    assert counts[~kept].sum() == 0, "a filtered-out id was drawn"
    assert 3 <= int(kept.sum()) < probs.numel(), "the filters must bite for this test to mean much"
    expected = probs[kept] * tokens.numel()
    assert expected.min() >= 5
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    assert chi2 < _wilson_hilferty(int(kept.sum()) - 1), (chi2, counts, expected)


# -- without the interpreter --------------------------------------------------------------------


def test_backend_choice():
    assert sampler_on("auto", "cpu") == "torch" and sampler_on("auto", "meta") == "triton"
    assert sampler_on("triton", "cpu") == "triton" and sampler_on("torch", "meta") == "torch"
    cpu = EngineTuning.for_device("cpu", env={})
    assert cpu.sampler == "auto"
    assert EngineTuning.for_device("cpu", env={"QTTS_SAMPLER": "Triton"}).sampler == "triton"
    with pytest.raises(ValueError, match="QTTS_SAMPLER"):
        EngineTuning.for_device("cpu", env={"QTTS_SAMPLER": "cuda"})
    with pytest.raises(ValueError, match="sampler"):
        replace(cpu, sampler="cuda")


def test_choose_tokens_on_cpu_is_the_twin():
    c = _mixed(100, 3)
    params = RowParams(**{k: c[k] for k in _PARAMS})
    kw = {k: c[k] for k in ("seen", "block_eos", "eos_id", "suppress")}
    out = torch.full((8,), -1, dtype=torch.int64)
    got = choose_tokens(c["logits"], params, c["seeds"], c["frames"], c["codebook"], out=out, **kw)
    assert got is out and out.tolist() == _twin(c).tolist()


_WITHOUT_TRITON = r"""
import sys
sys.modules["triton"] = sys.modules["triton.language"] = None  # makes `import triton` fail
import torch
import qtts.kernels.sampling as sampling
from qtts.kernels.rms_norm import rms_norm, rms_norm_twin
from qtts.kernels.silu_mul import silu_mul
from qtts.kernels.rope_cache import qk_norm_rope_cache
assert not sampling.TRITON_AVAILABLE
try:
    sampling.sample_tokens(torch.zeros(1, 4), torch.zeros(1, dtype=torch.int64), greedy=None,
                           temperature=None, top_k=None, top_p=None, repetition_penalty=None,
                           seen=None, block_eos=None, eos_id=0, suppress=None, seeds=None,
                           frames=None, codebook=0)
except RuntimeError as e:
    assert "triton" in str(e)
else:
    raise AssertionError("sample_tokens ran without triton")
x, w = torch.randn(2, 8), torch.randn(8)
assert torch.equal(rms_norm(x, w, 1e-6), rms_norm_twin(x, w, 1e-6))  # the ops run their twins
print("ok")
"""


def test_kernel_modules_import_without_triton():
    """A CPU-only install without triton: every kernel module imports, the layer ops run their
    twins, and the sampler launcher says what is missing. In a fresh process (triton blocked
    before anything imports it; the custom ops register once per process)."""
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TRITON], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
