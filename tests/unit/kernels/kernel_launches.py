"""Every Triton kernel in qtts.kernels, and the launches its own launcher makes at the published
model sizes (core/model/sizes.py), captured on CPU tensors without running anything.

A launch is intercepted at the kernel's `run` (what `kernel[grid](...)` calls), so the arguments,
constexprs and launch options are exactly the launcher's: compiling them for a GPU target gives
the specialization the engine gets. Kernels are found by walking qtts.kernels, so a new kernel
without a case here fails test_kernels_compile_for_gpus.py instead of going unchecked.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import pkgutil
import textwrap
from dataclasses import dataclass
from unittest import mock

import torch

import qtts.kernels as kernel_package
from qtts.core.model.sizes import SIZES
from qtts.kernels import sampling
from qtts.kernels.rms_norm import rms_norm_triton
from qtts.kernels.rope_cache import (
    checked_positions,
    qk_norm_rope_cache_triton,
    qk_norm_rope_prefill_triton,
)
from qtts.kernels.silu_mul import silu_mul_triton
from qtts.kernels.snake_beta import snake_beta_triton

HEAD_DIM = 128  # both published sizes
TALKER_VOCAB, PREDICTOR_VOCAB = 3072, 2048
SLOTS = 8  # batch rows; every size divides by 16 or is 1 the same way at any realistic batch
DTYPE = torch.bfloat16  # the model dtype on GPU


@dataclass(frozen=True)
class Launch:
    kernel: object  # triton JITFunction
    args: tuple
    kwargs: dict


def _returns_a_value(fn) -> bool:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(tree))


def discover_kernels() -> dict[str, object]:
    """name -> JITFunction for each kernel defined in qtts.kernels. Helpers (jit functions that
    return a value, called from kernels) are compiled as part of the kernels that call them."""
    from triton.runtime.jit import JITFunction

    found = {}
    for info in pkgutil.iter_modules(kernel_package.__path__):
        module = importlib.import_module(f"{kernel_package.__name__}.{info.name}")
        for name, obj in vars(module).items():
            if (isinstance(obj, JITFunction) and obj.fn.__module__ == module.__name__
                    and not _returns_a_value(obj.fn)):  # fmt: skip
                found[name] = obj
    return found


def _rms_norm(size: str) -> None:
    hidden = SIZES[size]["hidden"]
    rms_norm_triton(torch.randn(SLOTS, 1, hidden, dtype=DTYPE), torch.ones(hidden, dtype=DTYPE),
                    1e-6)  # fmt: skip


def _silu_mul(size: str) -> None:
    silu_mul_triton(torch.randn(SLOTS, 1, 2 * SIZES[size]["inter"], dtype=DTYPE))


def _snake_beta(channels: int, length: int, trim: int) -> None:
    """A speech-decoder SnakeBeta on SLOTS rows of a full window (325 frames); trim > 0: a
    transposed conv's trimmed output, the row stride past T. Empty: nothing runs."""
    x = torch.empty(SLOTS, channels, length + trim, dtype=DTYPE)[..., :length]  # [B, C, T]
    params = torch.zeros(channels, dtype=DTYPE)  # [C]
    snake_beta_triton(x, params, params, 1e-9)


def _qk_norm_rope_cache(tokens: int) -> None:
    """tokens=1: the talker's decode step (positions = each slot's length); 2: the predictor's
    first pass (frame-local positions, expanded with stride 0 along the batch)."""
    d = SIZES["0.6b"]
    heads, kv_heads, positions = d["heads"], d["kv"], 256
    qkv = torch.randn(SLOTS, tokens, (heads + 2 * kv_heads) * HEAD_DIM, dtype=DTYPE)
    cache = torch.zeros(2, 2, SLOTS, kv_heads, positions, HEAD_DIM, dtype=DTYPE)  # k|v, Ly, ...
    table = torch.randn(positions, HEAD_DIM // 2, dtype=DTYPE)
    norm = torch.ones(HEAD_DIM, dtype=DTYPE)
    if tokens == 1:
        pos = torch.arange(SLOTS)[:, None]  # [B, 1]
    else:
        pos = torch.arange(tokens).expand(SLOTS, tokens)  # [B, T]
    qk_norm_rope_cache_triton(qkv, norm, norm, table, table, pos, cache[0, 1], cache[1, 1],
                              heads, 1e-6)  # fmt: skip


def _qk_norm_rope_prefill(size: str) -> None:
    """A padded prefill group: SLOTS prompts of 64 positions into the odd slots of a cache with
    twice as many (each batch row its own cache row), k and v also returned."""
    d = SIZES[size]
    heads, kv_heads, positions, tokens = d["heads"], d["kv"], 256, 64
    qkv = torch.randn(SLOTS, tokens, (heads + 2 * kv_heads) * HEAD_DIM, dtype=DTYPE)
    cache = torch.zeros(2, 2, 2 * SLOTS, kv_heads, positions, HEAD_DIM, dtype=DTYPE)
    table = torch.randn(positions, HEAD_DIM // 2, dtype=DTYPE)
    norm = torch.ones(HEAD_DIM, dtype=DTYPE)
    pos = torch.arange(tokens).expand(SLOTS, tokens)  # [B, T], stride 0 along B
    rows = torch.arange(1, 2 * SLOTS, 2)  # [B]
    qk_norm_rope_prefill_triton(qkv, norm, norm, table, table, pos, cache[0, 1], cache[1, 1],
                                rows, heads, 1e-6)  # fmt: skip


def _qk_norm_rope_cache_checked() -> None:
    with checked_positions():  # as the tests and the engine's checked mode run it
        _qk_norm_rope_cache(1)


def _sample_tokens(vocab: int, site_inputs: bool) -> None:
    """The talker's site passes seen, block_eos and suppress; the predictor's none of them."""
    b = SLOTS
    rows = dict(greedy=torch.zeros(b, dtype=torch.bool), temperature=torch.ones(b),
                top_k=torch.zeros(b, dtype=torch.int64), top_p=torch.ones(b),
                repetition_penalty=torch.ones(b), seeds=torch.zeros(b, dtype=torch.int64),
                frames=torch.zeros(b, dtype=torch.int64))  # fmt: skip
    site = dict(seen=None, block_eos=None, suppress=None)
    if site_inputs:
        site = dict(seen=torch.zeros(b, vocab, dtype=torch.bool),
                    block_eos=torch.zeros(b, dtype=torch.bool),
                    suppress=torch.zeros(vocab, dtype=torch.bool))  # fmt: skip
    out = torch.empty(b, dtype=torch.int64)
    # The launcher refuses CPU tensors unless interpreted; nothing runs here, the launch is caught.
    with mock.patch.object(sampling, "INTERPRETED", True):
        sampling.sample_tokens(torch.randn(b, vocab), out, **rows, **site, eos_id=vocab - 1,
                               codebook=0)  # fmt: skip


# label -> a call of the kernel's launcher at a model size
CASES = {
    "rms_norm/0.6b": lambda: _rms_norm("0.6b"),
    "rms_norm/1.7b": lambda: _rms_norm("1.7b"),
    "silu_mul/0.6b": lambda: _silu_mul("0.6b"),
    "silu_mul/1.7b": lambda: _silu_mul("1.7b"),
    "snake_beta/decoder_in": lambda: _snake_beta(1536, 325 * 4, 0),  # the first block's input
    "snake_beta/trimmed": lambda: _snake_beta(768, 325 * 4 * 8, 8),  # after the x8 upsampling
    "qk_norm_rope_cache/talker": lambda: _qk_norm_rope_cache(1),
    "qk_norm_rope_cache/predictor": lambda: _qk_norm_rope_cache(2),
    "qk_norm_rope_cache/checked": _qk_norm_rope_cache_checked,
    "qk_norm_rope_cache/prefill/0.6b": lambda: _qk_norm_rope_prefill("0.6b"),
    "qk_norm_rope_cache/prefill/1.7b": lambda: _qk_norm_rope_prefill("1.7b"),
    "sample_tokens/talker": lambda: _sample_tokens(TALKER_VOCAB, site_inputs=True),
    "sample_tokens/predictor": lambda: _sample_tokens(PREDICTOR_VOCAB, site_inputs=False),
}


@contextlib.contextmanager
def _intercepted(kernels, into: list):
    def catch(kernel):
        return lambda *args, grid, warmup, **kwargs: into.append(Launch(kernel, args, kwargs))

    for kernel in kernels:
        kernel.run = catch(kernel)  # shadows JITFunction.run on this instance only
    try:
        yield
    finally:
        for kernel in kernels:
            del kernel.run


def capture(label: str) -> list[Launch]:
    """The launches CASES[label] makes, none of them run."""
    launches: list[Launch] = []
    with _intercepted(discover_kernels().values(), launches):
        CASES[label]()
    return launches
