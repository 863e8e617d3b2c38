"""The torch sampling twin: HF processor semantics, seeded draws, distribution."""

import math

import pytest
import torch

from qtts.core.engine.step.noise import gumbel, mix32, row_keys, uniform_noise, unit_from_bits
from qtts.core.engine.step.token_choice import (
    RowParams,
    apply_penalties,
    draw_among_top_k,
    filter_top_k_top_p,
    select_tokens,
)


def _lowbias32(x: int) -> int:
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_mix32_matches_python_integer_reference():
    xs = [0, 1, 2, 0xDEADBEEF, 0xFFFFFFFF, 123456789, 2**31]
    got = mix32(torch.tensor(xs, dtype=torch.int64)).tolist()
    assert got == [_lowbias32(x) for x in xs]


def test_noise_is_in_open_unit_interval_and_depends_on_every_key_part():
    base = uniform_noise(row_keys(torch.tensor([5]), torch.tensor([3]), 2), 4096)
    assert float(base.min()) > 0 and float(base.max()) < 1
    for seeds, frames, cb in [([6], [3], 2), ([5], [4], 2), ([5], [3], 3)]:
        other = uniform_noise(row_keys(torch.tensor(seeds), torch.tensor(frames), cb), 4096)
        assert not torch.equal(base, other)
    # 64-bit seeds: the high half matters too.
    hi = uniform_noise(row_keys(torch.tensor([5 + (1 << 40)]), torch.tensor([3]), 2), 64)
    assert not torch.equal(base[:, :64], hi)


# A (seed, frame 0, codebook 0) whose noise at vocab id 8 has every top bit set (found by a
# search over seeds): where 24-bit noise rounded u to 1, made +inf noise and, on an id filtered
# to -inf, NaN, which argmax picked. In a CPU job it drew suppressed control ids.
TOP_NOISE_SEED, TOP_NOISE_ID = 853901, 8


def test_noise_at_its_extremes_is_inside_the_unit_interval_and_finite():
    bits = torch.tensor([0, 1, 255, 0x7FFFFFFF, 0xFFFFFF00, 0xFFFFFFFF], dtype=torch.int64)
    u = unit_from_bits(bits)
    assert bool(((u > 0) & (u < 1)).all()) and bool(torch.isfinite(gumbel(u)).all())
    key = row_keys(torch.tensor([TOP_NOISE_SEED]), torch.tensor([0]), 0)
    assert int(mix32(key ^ mix32(torch.tensor(TOP_NOISE_ID + 0x9E3779B9)))) >> 8 == 0xFFFFFF


@pytest.mark.parametrize("filtered_by", ["suppress", "top_k", "top_p", "eos_block"])
def test_an_id_filtered_out_is_never_drawn_where_its_noise_is_highest(filtered_by):
    """The id with the highest noise wins among equals, and never once filtered out."""
    seeds, frames = torch.tensor([TOP_NOISE_SEED]), torch.zeros(1, dtype=torch.long)
    even = torch.zeros(1, 16)
    assert int(select_tokens(even, _params(1), seeds, frames, 0)) == TOP_NOISE_ID
    logits, params = even.clone(), _params(1)
    suppress = block = None
    if filtered_by == "suppress":
        suppress = torch.zeros(16, dtype=torch.bool)
        suppress[TOP_NOISE_ID] = True
    elif filtered_by == "eos_block":
        block = torch.tensor([True])
    else:
        logits[0, TOP_NOISE_ID] = -3.0  # below the top-k / top-p cut
        params = _params(1, top_k=4) if filtered_by == "top_k" else _params(1, top_p=0.5)
    scores = apply_penalties(logits, torch.ones(1), None, block, TOP_NOISE_ID, suppress)
    assert int(select_tokens(scores, params, seeds, frames, 0)) != TOP_NOISE_ID


def test_repetition_penalty_divides_positive_multiplies_negative():
    logits = torch.tensor([[2.0, -2.0, 1.0, -1.0]])
    seen = torch.tensor([[True, True, False, False]])
    out = apply_penalties(logits, torch.tensor([2.0]), seen, None, eos_id=0, suppress=None)
    assert out.tolist() == [[1.0, -4.0, 1.0, -1.0]]


def test_eos_block_and_suppression():
    logits = torch.zeros(2, 6)
    suppress = torch.tensor([False, False, False, True, True, False])
    block = torch.tensor([True, False])
    out = apply_penalties(logits, torch.ones(2), None, block, eos_id=5, suppress=suppress)
    assert out[0].tolist() == [0, 0, 0, -math.inf, -math.inf, -math.inf]
    assert out[1].tolist() == [0, 0, 0, -math.inf, -math.inf, 0]


def _params(n, **kw):
    base = dict(greedy=False, temperature=1.0, top_k=0, top_p=1.0)
    base.update(kw)
    return RowParams.fill(n, "cpu", **base)


def test_greedy_is_argmax_whatever_the_seed():
    scores = torch.randn(4, 100, generator=torch.Generator().manual_seed(0))
    for seed in range(5):
        tok = select_tokens(
            scores,
            _params(4, greedy=True),
            torch.full((4,), seed),
            torch.zeros(4, dtype=torch.long),
            0,
        )
        assert torch.equal(tok, scores.argmax(-1))


@pytest.mark.parametrize("kw", [dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-4)])
def test_degenerate_filters_reduce_to_argmax(kw):
    scores = torch.randn(8, 301, generator=torch.Generator().manual_seed(1))
    tok = select_tokens(scores, _params(8, **kw), torch.arange(8), torch.zeros(8).long(), 4)
    assert torch.equal(tok, scores.argmax(-1))


def test_top_k_keeps_ties_with_kth_value_like_hf():
    scores = torch.tensor([[3.0, 2.0, 2.0, 1.0]])
    out = filter_top_k_top_p(scores, torch.tensor([2]), torch.tensor([1.0]))
    assert out.tolist() == [[3.0, 2.0, 2.0, -math.inf]]


def test_top_p_keeps_smallest_prefix_reaching_mass():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    out = filter_top_k_top_p(probs.log(), torch.tensor([0]), torch.tensor([0.7]))
    assert torch.isfinite(out).tolist() == [[True, True, False, False]]


def test_only_eos_allowed_row_picks_eos():
    logits = torch.randn(3, 3072)
    suppress = torch.zeros(3072, dtype=torch.bool)
    suppress[2048:] = True
    suppress[2150] = False
    logits[:, :2048] = -math.inf  # nothing else left
    scores = apply_penalties(logits, torch.ones(3), None, None, 2150, suppress)
    tok = select_tokens(
        scores, _params(3, top_k=50, top_p=0.9), torch.arange(3), torch.zeros(3).long(), 0
    )
    assert tok.tolist() == [2150, 2150, 2150]


def test_draw_depends_only_on_row_seed_frame_codebook():
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(16, 2048, generator=gen)
    seeds, frames = torch.arange(100, 116), torch.arange(16) * 3
    batch = select_tokens(scores, _params(16, top_k=50), seeds, frames, 7)
    for i in [0, 5, 15]:
        alone = select_tokens(
            scores[i : i + 1], _params(1, top_k=50), seeds[i : i + 1], frames[i : i + 1], 7
        )
        assert int(alone) == int(batch[i])


def test_samples_follow_the_filtered_distribution_chi_squared():
    logits = torch.tensor([1.0, 0.5, 0.0, -0.5, -1.0, 2.0, -3.0, 0.2])
    params = _params(1, temperature=0.8, top_k=6, top_p=0.95)
    expected = filter_top_k_top_p(logits[None] / 0.8, params.top_k, params.top_p).softmax(-1)[0]
    n = 20000
    scores = logits.expand(n, -1)
    big = RowParams.fill(n, "cpu", greedy=False, temperature=0.8, top_k=6, top_p=0.95)
    toks = select_tokens(scores, big, torch.arange(n), torch.zeros(n).long(), 0)
    counts = torch.bincount(toks, minlength=8).float()
    support = expected > 0
    assert counts[~support].sum() == 0  # filtered tokens are never drawn
    exp_counts = expected[support] * n
    chi2 = float(((counts[support] - exp_counts) ** 2 / exp_counts).sum())
    dof = int(support.sum()) - 1
    assert chi2 < {3: 16.27, 4: 18.47, 5: 20.52}[dof]  # p = 0.001 critical values


def _full_vocab_draw(warped, top_k, keys):
    """The draw over the whole vocabulary (what the kernel and the GPU twin compute)."""
    top_p = torch.ones(warped.shape[0])
    filtered = filter_top_k_top_p(warped, top_k, top_p, top_p_off=True)
    u = uniform_noise(keys, warped.shape[-1])
    return (filtered - torch.log(-torch.log(u))).argmax(dim=-1)


def test_top_k_candidate_draw_equals_the_full_vocabulary_draw():
    gen = torch.Generator().manual_seed(3)
    for trial in range(200):
        batch, vocab = 6, 300
        warped = torch.randn(batch, vocab, generator=gen) * 3
        warped[0, 250:] = float("-inf")  # suppressed tail, as the talker's
        top_k = torch.randint(1, 40, (batch,), generator=gen)
        keys = row_keys(torch.arange(batch) + 1000 * trial, torch.full((batch,), trial), 1)
        got = draw_among_top_k(warped, top_k, 40, keys)
        assert got is not None
        assert torch.equal(got, _full_vocab_draw(warped, top_k, keys))


def test_top_k_candidate_draw_defers_on_ties_beyond_the_candidates():
    warped = torch.zeros(2, 64)  # all tied: the full filter keeps all 64
    warped[1, :3] = 1.0
    keys = row_keys(torch.tensor([1, 2]), torch.tensor([0, 0]), 1)
    assert draw_among_top_k(warped, torch.tensor([4, 4]), 8, keys) is None
    # Ties that fit inside the candidates are fine and match the full draw.
    warped = torch.randn(2, 64)
    warped[:, 10:13] = 5.0  # a three-way tie at the top, top_k = 2 keeps all three
    got = draw_among_top_k(warped, torch.tensor([2, 2]), 8, keys)
    assert torch.equal(got, _full_vocab_draw(warped, torch.tensor([2, 2]), keys))


def test_the_row_dtypes_list_every_per_row_tensor_of_row_params():
    """ROW_DTYPES is the one list fill, rows and the slot-state bytes read: a tensor added to
    RowParams without it would be neither filled nor counted."""
    import dataclasses

    from qtts.core.engine.step.token_choice import ROW_DTYPES, RowParams

    hints = {"all_greedy", "max_top_k", "top_p_off"}
    tensors = [f.name for f in dataclasses.fields(RowParams) if f.name not in hints]
    assert tensors == list(ROW_DTYPES)
    params = RowParams.fill(3, "cpu", greedy=False, temperature=0.7, top_k=5, top_p=0.9)
    assert {n: getattr(params, n).dtype for n in ROW_DTYPES} == ROW_DTYPES


def test_the_per_row_tensors_are_the_sampling_fields_by_name():
    """RowParams carries every SamplingParams field under its own name (do_sample as greedy), so
    from_sampling, the kernel's arguments and the doctor's draw need no line per parameter; and
    the kernel op takes them in ROW_DTYPES' order."""
    import dataclasses

    from qtts.core.engine.step.token_choice import ROW_DTYPES, RowParams, random_rows
    from qtts.core.model.config import SamplingParams
    from qtts.kernels.sampling import sample_tokens_op

    fields = [f.name for f in dataclasses.fields(SamplingParams)]
    assert ["greedy" if n == "do_sample" else n for n in fields] == list(ROW_DTYPES)
    site = SamplingParams(
        do_sample=True, temperature=0.7, top_k=5, top_p=0.9, repetition_penalty=1.3
    )
    params = RowParams.from_sampling(site, 2, "cpu")
    for name in fields:
        got = getattr(params, "greedy" if name == "do_sample" else name)
        want = not site.do_sample if name == "do_sample" else getattr(site, name)
        assert torch.allclose(got.double(), torch.full((2,), float(want), dtype=torch.double))
    op_args = [a.name for a in sample_tokens_op._opoverload._schema.arguments]
    assert op_args[2 : 2 + len(ROW_DTYPES)] == list(ROW_DTYPES)
    drawn = random_rows(64, "cpu", torch.Generator().manual_seed(0))
    assert {n: getattr(drawn, n).dtype for n in ROW_DTYPES} == ROW_DTYPES
    assert drawn.greedy.any() and not drawn.greedy.all() and (drawn.top_k == 0).any()
    with pytest.raises(TypeError, match="no sampling parameter penalty"):  # the old name
        RowParams.fill(2, "cpu", greedy=False, penalty=1.5)
