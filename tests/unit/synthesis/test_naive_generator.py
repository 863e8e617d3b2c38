"""The naive generator: batch invariance, budgets, and KV cache == naive recompute."""

import torch

from qtts.core.engine.step.token_choice import RowParams
from qtts.core.synthesis.naive_generator import GenerationInputs, NaiveGenerator
from qtts.core.synthesis.prompt import embed_prompt, normalize_row, pad_embedding, prompt_tokens

ROWS = [
    ("Hello world.", "Vivian", "English", None),
    ("你好，世界。", "eric", "auto", "be cheerful"),
    ("HeLLo WoRLD, tHis is a longer line of text.", "vivian", "chinese", None),
]


def _prompts(tiny, rows=ROWS):
    config, model, tok = tiny
    out = []
    for text, spk, lang, ins in rows:
        spk, lang, ins, _ = normalize_row(config, spk, lang, ins)
        out.append(
            embed_prompt(model.talker, config, prompt_tokens(config, tok, text, spk, lang, ins))
        )
    return out


def _generate(tiny, prompts, budgets, *, greedy=True, seeds=None):
    config, model, _ = tiny
    gen = NaiveGenerator(model, config, pad_embedding(model.talker, config))
    n = len(prompts)
    seeds = seeds or [11] * n
    params = dict(greedy=greedy, temperature=0.9, top_k=50, top_p=0.9)
    return gen.generate(
        GenerationInputs(
            prompts,
            budgets,
            seeds,
            RowParams.fill(n, "cpu", repetition_penalty=1.05, **params),
            RowParams.fill(n, "cpu", **params),
        )
    )


def test_batched_equals_single_greedy_and_sampled(tiny):
    prompts = _prompts(tiny)
    for greedy in (True, False):
        batch = _generate(tiny, prompts, [8, 8, 8], greedy=greedy)
        for i, p in enumerate(prompts):
            alone = _generate(tiny, [p], [8], greedy=greedy)[0]
            assert torch.equal(alone.codes, batch[i].codes)


def test_budget_gives_n_minus_one_frames_and_per_row_budgets(tiny):
    prompts = _prompts(tiny)
    out = _generate(tiny, prompts, [3, 9, 6])
    assert [o.codes.shape[0] for o in out] == [2, 8, 5]
    assert all(o.hit_budget for o in out)  # random weights never pick EOS
    full = _generate(tiny, prompts, [9, 9, 9])
    assert torch.equal(out[0].codes, full[0].codes[:2])
    assert out[0].codes.dtype == torch.int64 and int(out[0].codes.max()) < 2048


def test_seed_changes_sampled_codes(tiny):
    p = _prompts(tiny)[:1]
    a = _generate(tiny, p, [6], greedy=False, seeds=[1])[0].codes
    b = _generate(tiny, p, [6], greedy=False, seeds=[2])[0].codes
    assert not torch.equal(a, b)


class _ForceEos(torch.nn.Module):
    """codec_head wrapper: on its `call`-th use, row `row` gets a winning EOS logit."""

    def __init__(self, head, eos, row, call):
        super().__init__()
        self.head, self.eos, self.row, self.call, self.calls = head, eos, row, call, 0

    def forward(self, h):
        out = self.head(h)
        if self.calls == self.call:
            out[self.row, :, self.eos] = 1e4
        self.calls += 1
        return out


def test_eos_stops_one_row_early_others_run_on(tiny):
    config, model, _ = tiny
    prompts = _prompts(tiny)
    talker, head = model.talker, model.talker.codec_head
    talker.codec_head = _ForceEos(head, config.talker.codec_eos_token_id, row=1, call=4)
    try:
        out = _generate(tiny, prompts, [10, 10, 10])
        talker.codec_head = _ForceEos(head, config.talker.codec_eos_token_id, row=0, call=1)
        blocked = _generate(tiny, prompts[:1], [10])  # token 1: EOS still blocked (min 2)
    finally:
        talker.codec_head = head
    baseline = _generate(tiny, prompts, [10, 10, 10])
    assert [o.codes.shape[0] for o in out] == [9, 4, 9]  # call 4 picks token 4 -> 4 frames
    assert not out[1].hit_budget and out[0].hit_budget
    assert torch.equal(out[1].codes, baseline[1].codes[:4])
    assert torch.equal(out[0].codes, baseline[0].codes)  # the other rows are untouched
    assert blocked[0].codes.shape[0] == 9


def test_kv_cached_talker_matches_naive_recompute(tiny):
    """Prefill + cached single steps == one full forward over the whole sequence."""
    from qtts.core.synthesis.naive_generator import ConcatKV

    config, model, _ = tiny
    talker = model.talker
    torch.manual_seed(3)
    seq = torch.randn(1, 12, config.talker.hidden_size)
    pos = torch.arange(12)[None]
    with torch.no_grad():
        full = talker.model(seq, pos)  # [1, 12, H] no cache
        cache = ConcatKV(len(talker.model.layers))
        parts = [talker.model(seq[:, :8], pos[:, :8], None, cache)]
        for t in range(8, 12):
            parts.append(talker.model(seq[:, t : t + 1], pos[:, t : t + 1], None, cache))
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)


def test_prompt_length_matches_embedding(tiny):
    from qtts.core.synthesis.prompt import prompt_length

    config, model, tok = tiny
    for text, spk, lang, ins in ROWS:
        spk, lang, ins, _ = normalize_row(config, spk, lang, ins)
        tokens = prompt_tokens(config, tok, text, spk, lang, ins)
        assert prompt_length(tokens) == embed_prompt(model.talker, config, tokens).embeds.shape[0]
