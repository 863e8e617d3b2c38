"""A finished job may be followed by another (the synthesizer's retries): the follow-up joins the
queue like a waiting job, its first result is never yielded, and its codes are the ones it gives
alone (sampled draws keyed by its own seed), even when it is queued at the very last check."""

import engines
import torch

from qtts.core.engine.loop.scheduler import EngineJob, run_continuous

FOLLOW_SEED = 999  # the follow-ups' seed: another draw than any first job's (100 + i)


def _run(eng, jobs, again=None) -> tuple[dict, list]:
    out, order = {}, []
    for done in run_continuous(eng, jobs, again=again):
        for d in done:
            assert d.key not in out, f"job {d.key} came back twice"
            out[d.key], order = d.codes, [*order, d.key]
    return out, order


def test_follow_ups_replace_their_first_result_and_match_a_run_alone(tiny):
    prompts = engines.prompts(tiny)
    jobs = [EngineJob(i, pr, 6 + i, 100 + i) for i, pr in enumerate(prompts)]
    last = len(jobs) - 1  # the longest budget: it finishes at the last check of the pass
    followed = {0, last}
    asked = []

    def again(job, result):
        asked.append(job.key)
        if job.key in followed:
            return EngineJob(f"{job.key}+", job.prompt, job.budget, FOLLOW_SEED)
        return None

    got, order = _run(engines.engine(tiny, 2, False), jobs, again)
    assert sorted(asked, key=str) == sorted([*range(len(jobs)), "0+", f"{last}+"], key=str)
    assert set(got) == (set(range(len(jobs))) - followed) | {"0+", f"{last}+"}
    # The last job finished after every other one: its follow-up was queued with nothing left
    # waiting or running, and still ran.
    assert set(asked[: asked.index(last)]) == set(asked) - {last, f"{last}+"}
    assert order[-1] == f"{last}+"
    for key in followed:  # the follow-up alone, in a fresh engine of one slot
        alone = EngineJob("alone", prompts[key], 6 + key, FOLLOW_SEED)
        want, _ = _run(engines.engine(tiny, 1, False), [alone])
        assert torch.equal(got[f"{key}+"], want["alone"]), key
    plain, _ = _run(engines.engine(tiny, 2, False), jobs)  # the others as without follow-ups
    for key in set(range(len(jobs))) - followed:
        assert torch.equal(got[key], plain[key]), key
