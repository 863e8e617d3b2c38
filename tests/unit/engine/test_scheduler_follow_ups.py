"""A finished request may be followed by another (the synthesizer's retries): the follow-up joins
the queue like a waiting request, its first result is never yielded, and its codes are the ones it
gives alone (sampled draws keyed by its own seed), even when it is queued at the very last check."""

import engines
import torch

from qtts.core.engine.loop.scheduler import EngineRequest, run_continuous

FOLLOW_SEED = 999  # the follow-ups' seed: another draw than any first request's (100 + i)


def _run(eng, requests, again=None) -> tuple[dict, list]:
    out, order = {}, []
    for done in run_continuous(eng, requests, again=again):
        for d in done:
            assert d.key not in out, f"request {d.key} came back twice"
            out[d.key], order = d.codes, [*order, d.key]
    return out, order


def test_follow_ups_replace_their_first_result_and_match_a_run_alone(tiny):
    prompts = engines.prompts(tiny)
    requests = [EngineRequest(i, pr, 6 + i, 100 + i) for i, pr in enumerate(prompts)]
    last = len(requests) - 1  # the longest budget: it finishes at the last check of the pass
    followed = {0, last}
    asked = []

    def again(request, result):
        asked.append(request.key)
        if request.key in followed:
            return EngineRequest(f"{request.key}+", request.prompt, request.budget, FOLLOW_SEED)
        return None

    got, order = _run(engines.engine(tiny, 2, False), requests, again)
    assert sorted(asked, key=str) == sorted([*range(len(requests)), "0+", f"{last}+"], key=str)
    assert set(got) == (set(range(len(requests))) - followed) | {"0+", f"{last}+"}
    # The last request finished after every other one: its follow-up was queued with nothing left
    # waiting or running, and still ran.
    assert set(asked[: asked.index(last)]) == set(asked) - {last, f"{last}+"}
    assert order[-1] == f"{last}+"
    for key in followed:  # the follow-up alone, in a fresh engine of one slot
        alone = EngineRequest("alone", prompts[key], 6 + key, FOLLOW_SEED)
        want, _ = _run(engines.engine(tiny, 1, False), [alone])
        assert torch.equal(got[f"{key}+"], want["alone"]), key
    plain, _ = _run(engines.engine(tiny, 2, False), requests)  # the others as without follow-ups
    for key in set(range(len(requests))) - followed:
        assert torch.equal(got[key], plain[key]), key
