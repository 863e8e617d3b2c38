"""The Triton kernels == their torch twins on the device, with the kernel tests' tolerances: the
fused layer ops (RMSNorm, silu(gate) * up, q/k norm + RoPE + cache write) in fp32 and bf16 at the
real head and MLP sizes, the speech decoder's SnakeBeta at its widest (against its twin in fp32,
rounded once, as the kernel computes it), and the sampling kernel (greedy rows exactly, sampled
rows but for a rare ulp-flipped tie). On CPU only under triton's interpreter (TRITON_INTERPRET=1,
set before qtts starts), at smaller sizes."""

from __future__ import annotations

import importlib.util

import torch

from qtts.core.doctor.runner import Check, DoctorRun, skipped, verdict
from qtts.core.model.codec_modules import SNAKE_EPS

# Kernel vs twin: the kernels round where the twin rounds, so bf16 differs at most by one rounding
# flipped by fp32 noise (one ulp, relative); fp32 by a few ulps of values of order 1-10.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2**-7}
# (rows, hidden, MLP width, heads, KV heads, head dim, cache positions, sampling rows, vocabs)
SIZES = {
    "cuda": (64, 2048, 6144, 16, 8, 128, 512, 256, (2048, 3072)),
    "cpu": (4, 200, 1500, 8, 2, 32, 12, 16, (300,)),
}
# SnakeBeta's x [B, C, T]: on CUDA the first decoder block's input for a full window (325 frames)
SNAKE_SIZES = {"cuda": (8, 1536, 1300), "cpu": (2, 96, 300)}


def _rel(a, b) -> float:
    return ((a.float() - b.float()).abs() / b.float().abs().clamp_min(1.0)).max().item()


def _layer_ops(dev, dtype, g, sizes) -> dict[str, float]:
    from qtts.kernels.rms_norm import rms_norm_triton, rms_norm_twin
    from qtts.kernels.rope_cache import qk_norm_rope_cache_triton, qk_norm_rope_cache_twin
    from qtts.kernels.silu_mul import silu_mul_triton, silu_mul_twin

    b, hidden, inter, h, hk, d, s = sizes[:7]
    x = (3 * torch.randn(b, 1, hidden, device=dev, generator=g)).to(dtype)
    w = (1 + 0.1 * torch.randn(hidden, device=dev, generator=g)).to(dtype)
    gu = (2 * torch.randn(b, 2 * inter, device=dev, generator=g)).to(dtype)
    qkv = (2 * torch.randn(b, 1, (h + 2 * hk) * d, device=dev, generator=g)).to(dtype)
    qw, kw = [(1 + 0.1 * torch.randn(d, device=dev, generator=g)).to(dtype) for _ in range(2)]
    inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, device=dev).float() / d))
    f = torch.arange(s, device=dev).float()[:, None] * inv
    cos, sin = f.cos().to(dtype), f.sin().to(dtype)
    pos = torch.randint(0, s, (b, 1), device=dev, generator=g)
    start = torch.randn((2, 3, b, hk, s, d), device=dev, generator=g).to(dtype)
    mine, twin = start.clone(), start.clone()
    rope = dict(
        qkv=qkv, q_weight=qw, k_weight=kw, cos=cos, sin=sin, positions=pos, heads=h, eps=1e-6
    )
    q1 = qk_norm_rope_cache_triton(**rope, k_cache=mine[0, 1], v_cache=mine[1, 1])
    q2 = qk_norm_rope_cache_twin(**rope, k_cache=twin[0, 1], v_cache=twin[1, 1])
    return {
        "rms_norm": _rel(rms_norm_triton(x, w, 1e-6), rms_norm_twin(x, w, 1e-6)),
        "silu_mul": _rel(silu_mul_triton(gu), silu_mul_twin(gu)),
        "rope_cache_q": _rel(q1, q2),
        "rope_cache_kv": _rel(mine, twin),
    }


def _snake_beta(dev, dtype, g, shape) -> float:
    from qtts.kernels.snake_beta import snake_beta_triton, snake_beta_twin

    x = (3 * torch.randn(shape, device=dev, generator=g)).to(dtype)  # [B, C, T]
    la, lb = [(0.1 * torch.randn(shape[1], device=dev, generator=g)).to(dtype) for _ in "ab"]
    once = snake_beta_twin(x.float(), la.float(), lb.float(), SNAKE_EPS).to(dtype)
    return _rel(snake_beta_triton(x, la, lb, SNAKE_EPS), once)


def _sampling(dev, rows: int, vocab: int, g) -> tuple[bool, int]:
    """(greedy rows equal, sampled rows that differ) for random logits and per-row parameters
    with every feature on: penalties, EOS block, suppression, top-k, top-p, temperature."""
    from qtts.core.engine.step.token_choice import apply_penalties, random_rows, select_tokens
    from qtts.kernels.sampling import sample_tokens

    eos = vocab - 1
    suppress = torch.zeros(vocab, dtype=torch.bool, device=dev)
    suppress[vocab - 12 : vocab - 2] = True
    logits = 3 * torch.randn(rows, vocab, device=dev, generator=g)
    logits[:, eos] += 2.0  # EOS competes, so the block matters
    params = random_rows(rows, dev, g)
    seen = torch.rand(rows, vocab, device=dev, generator=g) < 0.05
    block_eos = torch.rand(rows, device=dev, generator=g) < 0.5
    site = dict(seen=seen, block_eos=block_eos, eos_id=eos, suppress=suppress)
    seeds = torch.randint(0, 2**62, (rows,), device=dev, generator=g)
    frames = torch.randint(0, 4000, (rows,), device=dev, generator=g)
    out = torch.empty(rows, dtype=torch.int64, device=dev)
    per_row = params.per_row()
    got = sample_tokens(logits, out, **per_row, **site, seeds=seeds, frames=frames, codebook=3)
    scores = apply_penalties(logits, params.repetition_penalty, **site)
    want = select_tokens(scores, params, seeds, frames, 3)
    greedy = params.greedy
    return bool(torch.equal(got[greedy], want[greedy])), int((got != want).sum())


def kernels_vs_twins(run: DoctorRun) -> Check:
    name = "triton kernels == twins"
    if importlib.util.find_spec("triton") is None:
        return skipped(name, "triton is not installed")
    from qtts.kernels.sampling import INTERPRETED

    if not run.cuda and not INTERPRETED:
        return skipped(name, "needs CUDA (or TRITON_INTERPRET=1 set before qtts starts, on CPU)")
    dev = run.device
    sizes = SIZES[dev.type]
    g = torch.Generator(device=dev).manual_seed(0)
    errors, bad = {}, []
    for dtype, tol in TOLERANCE.items():
        found = _layer_ops(dev, dtype, g, sizes)
        found["snake_beta"] = _snake_beta(dev, dtype, g, SNAKE_SIZES[dev.type])
        for op, err in found.items():
            key = f"{op}/{str(dtype).removeprefix('torch.')}"
            errors[key] = err
            if not err <= tol:  # a NaN fails too
                bad.append(f"{key} off by {err:.2e} (> {tol:.0e})")
    rows, sampled = sizes[7], {}
    for vocab in sizes[8]:
        greedy_equal, differ = _sampling(dev, rows, vocab, g)
        sampled[f"vocab_{vocab}"] = {"greedy_equal": greedy_equal, "rows_differing": differ}
        if not greedy_equal or differ > max(1, rows // 500):
            bad.append(f"sampling V={vocab}: greedy equal {greedy_equal}, {differ}/{rows} differ")
    where = "compiled for the GPU" if run.cuda else "in triton's interpreter"
    figures = {"where": where, "max_rel_error": errors, "sampling": sampled}
    held = f"{len(errors)} op and {len(sampled)} sampling cases within tolerance ({where})"
    return verdict(name, not bad, "; ".join(bad) or held, figures)
