"""Grouped slot prefill (one right-padded masked pass, the GPU path) vs each slot alone (the CPU
path, official single-request numerics): same state up to float rounding, same codes."""

import torch

from qtts.core.engine import Engine, SlotFill, SlotState
from qtts.core.prompt import embed_prompt, normalize_row, pad_embedding, prompt_tokens
from qtts.core.runner import EngineJob, run_continuous
from qtts.core.sampling import RowParams

TEXTS = ["Hi.", "A somewhat longer sentence to pad against.", "Mid length line here.",
         "Short one.", "Another fairly long line of text for the test.", "Ok."]  # fmt: skip


def _engine(tiny, slots, greedy):
    config, model, tok = tiny
    params = RowParams.fill(1, "cpu", greedy=greedy, temperature=0.9, top_k=50, top_p=1.0,
                            penalty=1.05)  # fmt: skip
    state = SlotState(config, slots, 128, 16, 1, talker=params, subtalker=params,
                      dtype=torch.float32, device="cpu")  # fmt: skip
    engine = Engine(model, config, state, pad_embedding(model.talker, config))
    prompts = []
    for text in TEXTS:
        spk, lang, ins, _ = normalize_row(config, "vivian", "english", None)
        prompts.append(embed_prompt(model.talker, config,
                                    prompt_tokens(config, tok, text, spk, lang, ins)))  # fmt: skip
    return engine, prompts, params


def test_grouped_prefill_state_matches_single(tiny):
    single, prompts, params = _engine(tiny, 3, greedy=True)
    grouped, _, _ = _engine(tiny, 3, greedy=True)
    fills = [SlotFill(i, p, 10, i, params, params) for i, p in enumerate(prompts[:3])]
    for f in fills:
        single.prefill([f])
    grouped.prefill(fills)
    a, b = single.state, grouped.state
    torch.testing.assert_close(b.past_hidden, a.past_hidden, atol=1e-5, rtol=1e-5)
    assert torch.equal(b.c0, a.c0) and torch.equal(b.kv.lengths, a.kv.lengths)
    for slot, p in enumerate(prompts[:3]):
        n = p.embeds.shape[0]
        torch.testing.assert_close(b.kv.k[:, slot, :, :n], a.kv.k[:, slot, :, :n], atol=1e-5,
                                   rtol=1e-5)  # fmt: skip


def _codes(tiny, group, greedy):
    engine, prompts, params = _engine(tiny, 3, greedy)
    jobs = [EngineJob(i, p, 6 + i, 100 + i, params, params) for i, p in enumerate(prompts)]
    out = {}
    for done in run_continuous(engine, jobs, check_every=2, view_bucket=16, prefill_group=group):
        out.update({d.key: d.codes for d in done})
    return out


def test_grouped_prefill_gives_the_same_codes_through_refills(tiny):
    for greedy in (True, False):
        alone, grouped = _codes(tiny, 1, greedy), _codes(tiny, 3, greedy)
        assert sorted(alone) == list(range(len(TEXTS)))
        for k in alone:
            assert alone[k].shape[0] == 5 + k  # budget 6 + k -> 5 + k frames
            assert torch.equal(grouped[k], alone[k]), k
