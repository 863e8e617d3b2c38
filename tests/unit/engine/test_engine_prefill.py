"""Grouped slot prefill (one right-padded masked pass, the GPU path) vs each slot alone (the CPU
path, official single-request numerics): same state up to float rounding, same codes."""

import engines
import torch

from qtts.core.engine.step.slots import SlotFill


def test_grouped_prefill_state_matches_single(tiny):
    single, grouped = engines.engine(tiny, 3, greedy=True), engines.engine(tiny, 3, greedy=True)
    prompts = engines.prompts(tiny)
    fills = [SlotFill(i, p, 10, i) for i, p in enumerate(prompts[:3])]
    for f in fills:
        single.prefill([f])
    grouped.prefill(fills)
    a, b = single.state, grouped.state
    torch.testing.assert_close(b.past_hidden, a.past_hidden, atol=1e-5, rtol=1e-5)
    assert torch.equal(b.c0, a.c0) and torch.equal(b.kv.lengths, a.kv.lengths)
    for name in ("budget", "seeds", "trailing_len", "num_tokens", "finished"):
        assert torch.equal(getattr(b, name), getattr(a, name)), name
    for slot, p in enumerate(prompts[:3]):
        n = p.embeds.shape[0]
        torch.testing.assert_close(b.kv.k[:, slot, :, :n], a.kv.k[:, slot, :, :n], atol=1e-5,
                                   rtol=1e-5)  # fmt: skip


def _codes(tiny, group, greedy):
    eng = engines.engine(tiny, 3, greedy, engines.cpu_tuning(prefill_group=group))
    return engines.run_codes(eng, engines.engine_requests(engines.prompts(tiny)))


def test_grouped_prefill_gives_the_same_codes_through_refills(tiny):
    for greedy in (True, False):
        alone, grouped = _codes(tiny, 1, greedy), _codes(tiny, 3, greedy)
        assert sorted(alone) == list(range(len(engines.TEXTS)))
        for k in alone:
            assert alone[k].shape[0] == 5 + k  # budget 6 + k -> 5 + k frames
            assert torch.equal(grouped[k], alone[k]), k


def test_grouped_prefill_puts_each_rows_trailing_text_in_its_own_slot(tiny):
    """Voice-clone prompts trail several distinct text rows; a grouped refill into slots given
    out of order must land each block in its own slot, as one-at-a-time refills do."""
    from qtts.core.engine.step.slots import Prompt

    prompts = engines.prompts(tiny)
    g = torch.Generator().manual_seed(5)
    h = prompts[0].embeds.shape[1]
    clone_like = [Prompt(p.embeds, torch.randn(n, h, generator=g))
                  for p, n in zip(prompts[:3], (3, 1, 5), strict=True)]  # fmt: skip
    slots = [2, 0, 3]  # out of order, slot 1 left empty
    fills = [SlotFill(s, p, 10, s) for s, p in zip(slots, clone_like, strict=True)]
    single = engines.engine(tiny, 4, True, max_trailing=8)
    for f in fills:
        single.prefill([f])
    grouped = engines.engine(tiny, 4, True, max_trailing=8)
    grouped.prefill(fills)
    for s, p in zip(slots, clone_like, strict=True):
        n = p.trailing.shape[0]
        assert int(grouped.state.trailing_len[s]) == n
        assert torch.equal(grouped.state.trailing[s, :n], p.trailing), s
    assert torch.equal(grouped.state.trailing, single.state.trailing)
    assert torch.equal(grouped.state.trailing_len, single.state.trailing_len)
