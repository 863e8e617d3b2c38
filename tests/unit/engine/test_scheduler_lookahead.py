"""The host loop builds the next prompts while the device runs the steps it just queued (before
the finished-flag sync), so a refill after the sync only launches its prefill."""

import engines
import torch

from qtts.core.engine.loop import scheduler
from qtts.core.engine.loop.scheduler import EngineRequest


def test_next_prompts_are_built_between_the_steps_and_the_sync(tiny, monkeypatch):
    events = []
    prompts = engines.prompts(tiny)

    def lazy(i):
        def build():
            events.append(("prompt", i))
            return prompts[i]

        return build

    requests = [EngineRequest(i, lazy(i), 6 + i, 100 + i) for i in range(len(prompts))]
    real_flags = scheduler._host_flags
    monkeypatch.setattr(
        scheduler, "_host_flags", lambda s: events.append(("sync",)) or real_flags(s)
    )
    eng = engines.engine(tiny, 2, True, engines.cpu_tuning(prefill_group=2))

    def step(view):
        events.append(("step",))
        eng.decode_step(view)

    got = engines.run_codes(eng, requests, step=step)
    first_step, first_sync = events.index(("step",)), events.index(("sync",))
    assert events[:2] == [("prompt", 0), ("prompt", 1)]  # the first fill
    ahead = [e for e in events[first_step:first_sync] if e[0] == "prompt"]
    assert ahead == [("prompt", 2), ("prompt", 3)]  # lookahead = min(slots, prefill_group)
    want = engines.run_codes(engines.engine(tiny, 2, True), engines.engine_requests(prompts))
    assert sorted(got) == sorted(want) == list(range(len(prompts)))
    for k in want:
        assert torch.equal(got[k], want[k]), k
