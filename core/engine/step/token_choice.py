"""Token selection: the pure-torch twin of kernels/sampling.py, and the dispatch between them.

Semantics follow the official (Hugging Face) logits processors, in this order: repetition penalty
over the row's previously generated ids -> EOS blocked while fewer than `min_new_tokens` were
generated -> suppressed ids -> (greedy rows: argmax here) -> temperature -> top-k (ties with the
k-th value kept) -> top-p (only when < 1) -> draw. The draw is Gumbel-max with noise that is a pure
function of (request seed, frame index, codebook index, vocab index) (qtts.core.engine.step.noise),
so a request's tokens do not depend on its batch, slot, device or a resume. Every per-row parameter
is a device tensor (graph-safe).

The choice between kernel and twin is EngineTuning.sampler, made here by hand rather than by a
CUDA kernel registered on one torch op (as kernels/rms_norm.py does): the twin uses host hints and
the CPU's host-syncing top-k draw, which an op's tensor schema cannot carry, and either side may
be forced on either device (the kernel interpreted on CPU, the twin on CUDA).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from qtts.core.engine.device.tuning import sampler_on
from qtts.core.engine.step.noise import gumbel, noise_at, row_keys, uniform_noise
from qtts.core.model.config import SamplingParams


@dataclass
class RowParams:
    """Per-row sampling parameters for one sampling site, as device tensors of length B."""

    greedy: torch.Tensor  # bool [B]
    temperature: torch.Tensor  # float32 [B]
    top_k: torch.Tensor  # int64 [B]; 0 = off
    top_p: torch.Tensor  # float32 [B]; >= 1 = off
    repetition_penalty: torch.Tensor  # float32 [B]; 1 = off (talker only)
    # Host-side facts true of EVERY row for the engine's life (None = unknown). They only let the
    # twin skip work no row needs; results are identical with or without them. Static per engine,
    # so a graph may bake them in; the per-row values above stay device tensors.
    all_greedy: bool | None = None
    max_top_k: int | None = None  # every row has 0 < top_k <= max_top_k
    top_p_off: bool | None = None  # every row has top_p >= 1

    @classmethod
    def fill(cls, n: int, device, *, greedy: bool, **values: float | int) -> RowParams:
        """n rows sharing one value per parameter: `greedy` and SamplingParams' other fields by
        their names (a field left out takes its default: 1.0 repetition penalty = off)."""

        def full(v, dtype):
            return torch.full((n,), v, dtype=dtype, device=device)

        unknown = values.keys() - _DEFAULTS.keys()
        if unknown:  # a misspelt or retired name would otherwise sample with the default
            raise TypeError(f"RowParams.fill: no sampling parameter {', '.join(sorted(unknown))}")
        values = {**_DEFAULTS, **values, "greedy": greedy}
        all_greedy, max_top_k, top_p_off = _hints(greedy, values["top_k"], values["top_p"])
        return cls(
            **{name: full(values[name], dtype) for name, dtype in ROW_DTYPES.items()},
            all_greedy=all_greedy,
            max_top_k=max_top_k,
            top_p_off=top_p_off,
        )

    @classmethod
    def from_sampling(cls, params: SamplingParams, n: int, device) -> RowParams:
        """n rows of one site's engine-wide sampling parameters (host hints included): every
        field by its own name, do_sample as its opposite (greedy)."""
        values = {f.name: getattr(params, f.name) for f in fields(params) if f.name != "do_sample"}
        return cls.fill(n, device, greedy=not params.do_sample, **values)

    def per_row(self) -> dict[str, torch.Tensor]:
        """The per-row tensors by name, in ROW_DTYPES' order (the kernel op's)."""
        return {name: getattr(self, name) for name in ROW_DTYPES}

    def rows(self, index: torch.Tensor) -> RowParams:
        """The rows `index` (copies), hints kept."""
        return replace(self, **{name: t[index] for name, t in self.per_row().items()})


# RowParams' per-row tensors and their dtypes: the one list (fill, rows and the memory plan's
# slot-state bytes read it; a test ties it to the dataclass's fields).
ROW_DTYPES = {
    "greedy": torch.bool,
    "temperature": torch.float32,
    "top_k": torch.int64,
    "top_p": torch.float32,
    "repetition_penalty": torch.float32,
}


def random_rows(n: int, device, generator: torch.Generator) -> RowParams:
    """n rows of random parameters, each feature on in some rows and off in others: what a
    check of the kernel against this twin draws (qtts doctor). No host hints."""

    def rand(*shape):
        return torch.rand(*shape, device=device, generator=generator)

    top_k = torch.randint(0, 80, (n,), device=device, generator=generator) * (rand(n) < 0.7)
    return RowParams(
        greedy=rand(n) < 0.25,
        temperature=0.3 + 1.5 * rand(n),
        top_k=top_k,
        top_p=torch.where(rand(n) < 0.5, 1.0, 0.5 + 0.45 * rand(n)).float(),
        repetition_penalty=1.0 + 0.5 * rand(n),
    )


# A field fill() is not given takes SamplingParams' own default (the per-row tensors are
# SamplingParams' fields, do_sample carried as greedy: a test ties the two lists).
_DEFAULTS = {f.name: f.default for f in fields(SamplingParams) if f.name != "do_sample"}


def _hints(greedy: bool, top_k: int, top_p: float) -> tuple:
    """(all_greedy, max_top_k, top_p_off) of rows that all share these values."""
    return greedy, (top_k if top_k > 0 else None), top_p >= 1.0


def apply_penalties(
    logits: torch.Tensor,  # float32 [B, V]
    repetition_penalty: torch.Tensor,  # float32 [B]
    seen: torch.Tensor | None,  # bool [B, V]: ids this row generated before
    block_eos: torch.Tensor | None,  # bool [B]: row has generated < min_new_tokens ids
    eos_id: int,
    suppress: torch.Tensor | None,  # bool [V]
) -> torch.Tensor:
    """The value-changing processors (applied to greedy and sampled rows alike)."""
    out = logits
    if seen is not None:
        p = repetition_penalty[:, None]
        penalised = torch.where(out < 0, out * p, out / p)
        out = torch.where(seen, penalised, out)
    neg_inf = out.new_full((), float("-inf"))  # a fill, not a host copy: graph-capturable
    if block_eos is not None:
        col = torch.zeros_like(out, dtype=torch.bool)
        col[:, eos_id] = True
        out = torch.where(col & block_eos[:, None], neg_inf, out)
    if suppress is not None:
        out = torch.where(suppress[None, :], neg_inf, out)
    return out


def filter_top_k_top_p(
    scores: torch.Tensor,  # float32 [B, V]
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    *,
    max_top_k: int | None = None,
    top_p_off: bool | None = None,
) -> torch.Tensor:
    """HF TopK then TopP warpers with per-row parameters (hints: see RowParams)."""
    neg_inf = scores.new_full((), float("-inf"))
    vocab = scores.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), vocab)
    if max_top_k is not None:  # every row filters: the k-th value needs only a top-k, no sort
        largest = scores.topk(min(max_top_k, vocab), dim=-1).values  # [B, kmax]
        kth = largest.gather(1, (k.clamp(max=largest.shape[1]) - 1)[:, None])  # [B, 1]
    else:
        kth = scores.sort(dim=-1, descending=True).values.gather(1, (k - 1)[:, None])
    scores = torch.where(scores < kth, neg_inf, scores)
    if top_p_off:
        return scores

    sorted_asc, order = scores.sort(dim=-1, descending=False)  # [B, V]
    cum = sorted_asc.softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= (1 - top_p)[:, None]
    remove[:, -1] = False  # keep at least one token
    remove = remove & (top_p < 1.0)[:, None]
    remove = remove.scatter(1, order, remove)
    return torch.where(remove, neg_inf, scores)


def select_tokens(
    scores: torch.Tensor,  # float32 [B, V], after apply_penalties
    params: RowParams,
    seeds: torch.Tensor,  # int64 [B]
    frames: torch.Tensor,  # int64 [B]: the row's own frame index
    codebook: int,
    *,
    allow_host_sync: bool = False,
) -> torch.Tensor:
    """Greedy rows: argmax. Sampled rows: temperature, top-k, top-p, seeded Gumbel-max draw.
    allow_host_sync: the caller runs eagerly on the CPU, so the top-k candidate draw (which reads
    one flag on the host) may replace the full-vocabulary draw; never inside a graph."""
    greedy_ids = scores.argmax(dim=-1)
    if params.all_greedy:
        return greedy_ids
    warped = scores / params.temperature[:, None]
    keys = row_keys(seeds, frames, codebook)
    drawn = None
    if allow_host_sync and params.max_top_k is not None and params.top_p_off:
        drawn = draw_among_top_k(warped, params.top_k, params.max_top_k, keys)
    if drawn is None:
        warped = filter_top_k_top_p(
            warped,
            params.top_k,
            params.top_p,
            max_top_k=params.max_top_k,
            top_p_off=params.top_p_off,
        )
        u = uniform_noise(keys, scores.shape[-1])
        drawn = (warped + gumbel(u)).argmax(dim=-1)  # noise finite: -inf stays -inf
    return torch.where(params.greedy, greedy_ids, drawn)


def draw_among_top_k(
    warped: torch.Tensor,  # float32 [B, V], temperature applied
    top_k: torch.Tensor,  # int64 [B], every row 0 < top_k <= max_top_k
    max_top_k: int,
    keys: torch.Tensor,  # int64 [B], row_keys
) -> torch.Tensor | None:
    """The full-vocabulary draw computed on each row's top-k candidates only (CPU fast path).

    Tokens outside the top-k are -inf after filtering, so the Gumbel-max winner is among the
    candidates, and the noise is a function of the vocab index: drawing among them with their own
    noise gives the same token. Exact ties are resolved to the lowest vocab index, as argmax over
    the vocabulary does. Returns None when ties at the k-th value would keep more tokens than the
    candidates hold, or a row has no finite candidate (the caller then takes the full path): that
    check reads a flag on the host, so this path is for CPU tensors (no graph) only."""
    vocab = warped.shape[-1]
    values, index = warped.topk(min(max_top_k, vocab), dim=-1)  # [B, kmax], descending
    k = top_k.clamp(max=values.shape[1])
    kth = values.gather(1, (k - 1)[:, None])  # [B, 1]
    kept = (warped >= kth).sum(dim=-1)  # what the full filter keeps (ties included)
    if bool(((kept > values.shape[1]) | ~torch.isfinite(kth[:, 0])).any()):
        return None
    neg_inf = warped.new_full((), float("-inf"))
    scored = torch.where(values >= kth, values + gumbel(noise_at(keys, index)), neg_inf)
    best = scored.max(dim=-1, keepdim=True).values
    return torch.where(scored == best, index, vocab).min(dim=-1).values  # lowest index on ties


def choose_tokens(
    logits: torch.Tensor,  # float32 [B, V]
    params: RowParams,
    seeds: torch.Tensor,  # int64 [B]
    frames: torch.Tensor,  # int64 [B]: each row's own frame index
    codebook: int,
    *,
    seen: torch.Tensor | None = None,  # bool [B, V]
    block_eos: torch.Tensor | None = None,  # bool [B]
    eos_id: int = -1,
    suppress: torch.Tensor | None = None,  # bool [V]
    out: torch.Tensor | None = None,  # int64 [B]; written when given
    allow_host_sync: bool = False,  # see select_tokens
    sampler: str = "auto",  # EngineTuning.sampler: "auto" | "torch" | "triton"
) -> torch.Tensor:
    """apply_penalties + select_tokens, by the Triton kernel or by this twin. Returns int64 [B]
    token ids (`out` itself when given)."""
    if sampler_on(sampler, logits.device) == "triton":
        from qtts.kernels.sampling import TRITON_AVAILABLE, sample_tokens_op

        if not TRITON_AVAILABLE and not logits.is_meta:
            raise ValueError("the triton sampler (QTTS_SAMPLER=triton) needs triton: install it")
        if out is None:
            out = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)  # [B]
        sample_tokens_op(
            logits,
            out,
            *params.per_row().values(),  # in the op's order, greedy first
            seen,
            block_eos,
            eos_id,
            suppress,
            seeds,
            frames,
            codebook,
        )
        return out
    scores = apply_penalties(
        logits,
        params.repetition_penalty,
        seen=seen,
        block_eos=block_eos,
        eos_id=eos_id,
        suppress=suppress,
    )
    tokens = select_tokens(scores, params, seeds, frames, codebook, allow_host_sync=allow_host_sync)
    if out is None:
        return tokens
    return out.copy_(tokens)
