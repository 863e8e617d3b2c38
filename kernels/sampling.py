"""The sampling kernel: penalties, filters and the seeded draw for one sampling site, one row per
program. Semantics are those of the pure-torch twin in core/engine/step/token_choice.py
(apply_penalties then select_tokens); tests/unit/kernels/test_sampling_kernel.py ties the two
together.

The whole vocabulary of a row sits in one block (BLOCK_V = next power of two >= V, masked). No
sort: the top-k threshold and the HF top-p cut are found by exact radix searches over an integer
image of the scores (32 bits in 32 / SEARCH_BITS counting steps). Every per-row parameter is read
from a device tensor, so a captured CUDA graph keeps working when the caller rewrites those
tensors between replays; the launcher allocates nothing.

This module knows logits, token ids and per-row parameters; it knows nothing of requests or models.
Importable without triton: check TRITON_AVAILABLE before calling sample_tokens.
"""

from __future__ import annotations

import torch

from qtts.kernels.backend import TRITON_AVAILABLE, is_interpreted, tl, triton

# Bits resolved per step of the threshold searches: 32 / SEARCH_BITS counting steps over a
# [2^SEARCH_BITS, BLOCK_V] tile. Every divisor of 32 gives the same answer; 4 halves the block
# reductions of 2 and, compiled for sm_80/sm_90 with BLOCK_V = 4096, uses 128 registers, no spills.
SEARCH_BITS = 4

if TRITON_AVAILABLE:
    # tl.sum's own combine function when it exists: the interpreter reduces it with one numpy
    # call, where each call of a jitted helper (tl.sum included) costs milliseconds of patching.
    _add = getattr(tl.standard, "_sum_combine", None)
    if _add is None:

        @triton.jit
        def _add(a, b):
            return a + b

    @triton.jit
    def _order_key(x):
        """float32 -> int32 (as int64) in the same order, -0.0 read as +0.0 so ties stay ties."""
        bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
        return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).to(tl.int64)

    @triton.jit
    def _key_to_float(key):
        """Inverse of _order_key, for one key in the int32 range."""
        bits = key.to(tl.int32)
        return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)

    @triton.jit
    def _kth_largest(w, k, SEARCH_BITS: tl.constexpr):
        """The k-th largest value of w (1 <= k <= V): the largest key t with count(key >= t) >= k,
        by radix search over the int32 range. Each step counts 2^SEARCH_BITS thresholds at once
        and keeps the slice [lo, lo + step) that holds t; exact, no sort."""
        key = _order_key(w)  # [BLOCK_V]
        j = tl.arange(0, 2**SEARCH_BITS).to(tl.int64)
        lo = tl.full([], -(2**31), tl.int64)  # invariant: count(key >= lo) >= k
        for i in range(32 // SEARCH_BITS):
            step = tl.full([], 1, tl.int64) << (32 - SEARCH_BITS * (i + 1))
            above = key[None, :] >= (lo + j * step)[:, None]  # [2^SEARCH_BITS, BLOCK_V]
            counts = tl.reduce(above.to(tl.int32), 1, _add)
            lo += (tl.reduce((counts >= k).to(tl.int32), 0, _add) - 1) * step  # counts[0] >= k
        return _key_to_float(lo)

    @triton.jit
    def _top_p_floor(w, limit, SEARCH_BITS: tl.constexpr):
        """The smallest value HF top-p keeps. HF sorts ascending and drops each position whose
        cumulative probability is <= limit (= 1 - top_p), except the last; that cumsum at x is
        the mass of all values <= x, so this is the smallest t with mass(<= t) > limit, or the
        maximum when rounding leaves none. Same radix search as _kth_largest."""
        top = tl.max(w, axis=0)
        e = tl.exp(w - top)
        probs = tl.math.div_rn(e, tl.reduce(e, 0, _add))  # softmax
        key = _order_key(w)  # [BLOCK_V]
        j = tl.arange(0, 2**SEARCH_BITS).to(tl.int64)
        lo = tl.full([], -(2**31), tl.int64)  # invariant: mass(key <= lo) <= limit (-inf only)
        for i in range(32 // SEARCH_BITS):
            step = tl.full([], 1, tl.int64) << (32 - SEARCH_BITS * (i + 1))
            below = key[None, :] <= (lo + j * step)[:, None]  # [2^SEARCH_BITS, BLOCK_V]
            mass = tl.reduce(tl.where(below, probs[None, :], 0.0), 1, _add)
            lo += (tl.reduce((mass <= limit).to(tl.int32), 0, _add) - 1) * step  # mass[0] ok
        return _key_to_float(tl.minimum(lo + 1, _order_key(top)))

    @triton.jit
    def _gumbel_noise(offs, seed, frame, codebook):
        """-log(-log(u)) with u from the twin's row_keys / uniform_noise, in uint32 arithmetic.
        The lowbias32 body is written out (not a helper) to keep interpreter calls few."""
        h = (frame * 32 + codebook).to(tl.uint32)
        for i in tl.static_range(3):  # row key: mix(mix(mix(frame*32+cb) ^ seed_hi) ^ seed_lo)
            h = h ^ (h >> 16)
            h = h * 0x7FEB352D
            h = h ^ (h >> 15)
            h = h * 0x846CA68B
            h = h ^ (h >> 16)
            if i == 0:
                h = h ^ (seed >> 32).to(tl.uint32)
            if i == 1:
                h = h ^ seed.to(tl.uint32)
        x = offs.to(tl.uint32) + 0x9E3779B9
        for i in tl.static_range(2):  # per index: mix(row_key ^ mix(v + golden))
            x = x ^ (x >> 16)
            x = x * 0x7FEB352D
            x = x ^ (x >> 15)
            x = x * 0x846CA68B
            x = x ^ (x >> 16)
            if i == 0:
                x = x ^ h
        # noise.UNIT_BITS (23): n + 0.5 is exact in float32, so u is never 0 or 1
        u = ((x >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)
        return -tl.log(-tl.log(u))

    @triton.jit
    def _sample_kernel(
        logits_ptr,  # float [B, V], unit stride along V
        logits_stride,
        out_ptr,  # int64 [B]
        greedy_ptr,  # uint8 [B] (bool viewed as bytes)
        temperature_ptr,  # float32 [B]
        top_k_ptr,  # int64 [B]; 0 = off
        top_p_ptr,  # float32 [B]; >= 1 = off
        repetition_penalty_ptr,  # float32 [B]
        seen_ptr,  # uint8 [B, V] (read only when HAS_SEEN)
        seen_stride,
        block_eos_ptr,  # uint8 [B] (read only when HAS_BLOCK_EOS)
        suppress_ptr,  # uint8 [V] (read only when HAS_SUPPRESS)
        seeds_ptr,  # int64 [B]
        frames_ptr,  # int64 [B]
        eos_id,
        codebook,
        vocab_size,
        BLOCK_V: tl.constexpr,
        HAS_SEEN: tl.constexpr,
        HAS_BLOCK_EOS: tl.constexpr,
        HAS_SUPPRESS: tl.constexpr,
        SEARCH_BITS: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK_V)
        in_vocab = offs < vocab_size
        x = tl.load(logits_ptr + row * logits_stride + offs, mask=in_vocab, other=float("-inf"))
        x = x.to(tl.float32)

        # apply_penalties: greedy and sampled rows alike.
        if HAS_SEEN:
            p = tl.load(repetition_penalty_ptr + row)
            seen = tl.load(seen_ptr + row * seen_stride + offs, mask=in_vocab, other=0) != 0
            x = tl.where(seen, tl.where(x < 0, x * p, tl.math.div_rn(x, p)), x)
        if HAS_BLOCK_EOS:
            blocked = tl.load(block_eos_ptr + row) != 0
            x = tl.where((offs == eos_id) & blocked, float("-inf"), x)
        if HAS_SUPPRESS:
            sup = tl.load(suppress_ptr + offs, mask=in_vocab, other=0) != 0
            x = tl.where(sup, float("-inf"), x)

        # select_tokens: temperature, top-k (ties with the k-th kept), top-p, Gumbel-max draw.
        # Greedy rows skip the filters and take the argmax of x itself. Divisions are IEEE
        # (div_rn) as torch's are: plain `/` compiles to the 2-ulp div.full.f32 on CUDA.
        sampled = tl.load(greedy_ptr + row) == 0
        w = tl.math.div_rn(x, tl.load(temperature_ptr + row))
        k = tl.load(top_k_ptr + row)
        if sampled & (k > 0) & (k < vocab_size):
            w = tl.where(w < _kth_largest(w, k, SEARCH_BITS), float("-inf"), w)
        top_p = tl.load(top_p_ptr + row)
        if sampled & (top_p < 1.0):
            w = tl.where(w < _top_p_floor(w, 1.0 - top_p, SEARCH_BITS), float("-inf"), w)
        seed = tl.load(seeds_ptr + row)
        frame = tl.load(frames_ptr + row)
        # The noise is finite with torch's log (the twin adds it as is); here a filtered id
        # stays -inf even under a Triton whose tl.log is a fast one (no NaN for argmax).
        w = tl.where(w == float("-inf"), w, w + _gumbel_noise(offs, seed, frame, codebook))
        choice = tl.argmax(tl.where(sampled, w, x), axis=0)  # first maximum, as torch.argmax
        tl.store(out_ptr + row, choice.to(tl.int64))

    # Triton decides at decoration time: TRITON_INTERPRET=1 (read then) runs kernels in numpy.
    INTERPRETED = is_interpreted(_sample_kernel)
else:
    INTERPRETED = False


def _check(name: str, t: torch.Tensor, dtype: torch.dtype, shape: tuple, device) -> None:
    if t.dtype != dtype or tuple(t.shape) != shape or t.device != device:
        raise ValueError(
            f"sample_tokens: {name} must be {dtype} {list(shape)} on {device}, "
            f"got {t.dtype} {list(t.shape)} on {t.device}"
        )
    if t.dim() and t.stride(-1) != 1:
        raise ValueError(f"sample_tokens: {name} must have unit stride along its last dim")


def _check_inputs(logits, out, rows: dict, seen, block_eos, eos_id: int, suppress) -> int:
    """Shapes, dtypes and devices (metadata only: no sync). Returns eos_id in [0, V)."""
    if logits.dim() != 2 or logits.stride(-1) != 1:
        raise ValueError(
            f"sample_tokens: logits must be [B, V] with unit stride along V, got shape "
            f"{list(logits.shape)} strides {list(logits.stride())}"
        )
    batch, vocab = logits.shape
    dev = logits.device
    if dev.type == "cpu" and not INTERPRETED:
        raise ValueError(
            "sample_tokens got CPU tensors but triton compiles for a GPU: set TRITON_INTERPRET=1 "
            "before importing qtts, or QTTS_SAMPLER=torch"
        )
    _check("out", out, torch.int64, (batch,), dev)
    for name, (t, dtype) in rows.items():
        _check(name, t, dtype, (batch,), dev)
    if seen is not None:
        _check("seen", seen, torch.bool, (batch, vocab), dev)
    if block_eos is not None:
        _check("block_eos", block_eos, torch.bool, (batch,), dev)
        if not -vocab <= eos_id < vocab:
            raise ValueError(f"sample_tokens: eos_id {eos_id} is outside a vocab of {vocab}")
    if suppress is not None:
        _check("suppress", suppress, torch.bool, (vocab,), dev)
    return eos_id % vocab  # Python indexing, as the twin's col[:, eos_id] (-1 = last id)


def sample_tokens(
    logits: torch.Tensor,  # float [B, V], read as fp32
    out: torch.Tensor,  # int64 [B]: the chosen ids are written here
    *,
    greedy: torch.Tensor,  # bool [B]
    temperature: torch.Tensor,  # float32 [B]
    top_k: torch.Tensor,  # int64 [B]; 0 = off
    top_p: torch.Tensor,  # float32 [B]; >= 1 = off
    repetition_penalty: torch.Tensor,  # float32 [B]; used only with `seen`
    seen: torch.Tensor | None,  # bool [B, V]: ids the row generated before
    block_eos: torch.Tensor | None,  # bool [B]: EOS not allowed yet
    eos_id: int,
    suppress: torch.Tensor | None,  # bool [V]
    seeds: torch.Tensor,  # int64 [B]
    frames: torch.Tensor,  # int64 [B]: each row's own frame index
    codebook: int,
) -> torch.Tensor:
    """One token per row into `out` (returned); the twin is apply_penalties + select_tokens.

    No allocation and no host sync, so it can be captured in a CUDA graph; per-row parameters are
    read from their tensors at replay time. CPU tensors need TRITON_INTERPRET=1 set before this
    module is imported."""
    if not TRITON_AVAILABLE:
        raise RuntimeError(
            "sample_tokens needs triton; use qtts.core.engine.step.token_choice.choose_tokens"
        )
    rows = {
        "greedy": (greedy, torch.bool),
        "temperature": (temperature, torch.float32),
        "top_k": (top_k, torch.int64),
        "top_p": (top_p, torch.float32),
        "repetition_penalty": (repetition_penalty, torch.float32),
        "seeds": (seeds, torch.int64),
        "frames": (frames, torch.int64),
    }
    eos_id = _check_inputs(
        logits, out, rows, seen=seen, block_eos=block_eos, eos_id=eos_id, suppress=suppress
    )
    batch, vocab = logits.shape
    if batch == 0:
        return out
    block_v = triton.next_power_of_2(vocab)
    as_bytes = greedy.view(torch.uint8)  # also the placeholder for absent optional inputs
    _sample_kernel[(batch,)](
        logits,
        logits.stride(0),
        out,
        as_bytes,
        temperature,
        top_k,
        top_p,
        repetition_penalty,
        seen.view(torch.uint8) if seen is not None else as_bytes,
        seen.stride(0) if seen is not None else 0,
        block_eos.view(torch.uint8) if block_eos is not None else as_bytes,
        suppress.view(torch.uint8) if suppress is not None else as_bytes,
        seeds,
        frames,
        eos_id,
        codebook,
        vocab,
        BLOCK_V=block_v,
        HAS_SEEN=seen is not None,
        HAS_BLOCK_EOS=block_eos is not None,
        HAS_SUPPRESS=suppress is not None,
        SEARCH_BITS=SEARCH_BITS,
        num_warps=4 if block_v <= 2048 else 8,
    )
    return out


@torch.library.custom_op("qtts::sample_tokens", mutates_args=("out",))
def sample_tokens_op(
    logits: torch.Tensor,
    out: torch.Tensor,
    greedy: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    repetition_penalty: torch.Tensor,
    seen: torch.Tensor | None,
    block_eos: torch.Tensor | None,
    eos_id: int,
    suppress: torch.Tensor | None,
    seeds: torch.Tensor,
    frames: torch.Tensor,
    codebook: int,
) -> None:
    """sample_tokens as one torch op (its arguments, in order), so a meta-device launch count and
    torch.compile see one opaque op per sampling site. Every device runs the kernel (CPU tensors
    need TRITON_INTERPRET=1); meta and fake tensors only get their shapes."""
    sample_tokens(
        logits,
        out,
        greedy=greedy,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        repetition_penalty=repetition_penalty,
        seen=seen,
        block_eos=block_eos,
        eos_id=eos_id,
        suppress=suppress,
        seeds=seeds,
        frames=frames,
        codebook=codebook,
    )


@sample_tokens_op.register_fake
def _(
    logits,
    out,
    greedy,
    temperature,
    top_k,
    top_p,
    repetition_penalty,
    seen,
    block_eos,
    eos_id,
    suppress,
    seeds,
    frames,
    codebook,
) -> None:
    return None
