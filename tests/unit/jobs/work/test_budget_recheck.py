"""The resume rule for the frame-budget policy (core/jobs/work/budget.py) on crafted records:
which done rows each policy keeps, records made before the policy was recorded, and the reasons
the rerun logs. The job-level run of the same rule is tests/cli/test_budget_retry_job.py."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from qtts.core.jobs.work.budget import recheck_budget
from qtts.core.jobs.work.resume import ResumeScan

# id -> (on_budget recorded, attempts, hit_frame_budget) of a done (ok) row
DONE = {
    "stopped": ("ok", 1, False),
    "flagged": ("ok", 1, True),
    "stopped_r": ("retry/3", 1, False),
    "second": ("retry/3", 2, False),
    "third": ("retry/3", 3, False),
    "stopped_f": ("fail", 1, False),
    "old": (None, None, False),  # recorded before qtts retried
    "old_flagged": (None, None, True),
}
# What each policy redoes of DONE: every other done row keeps its codes under it.
REDONE = {
    "ok": {"second", "third"},  # ok keeps the first try, flagged or not
    "fail": {"flagged", "old_flagged", "second", "third"},
    "retry/1": {"flagged", "old_flagged", "second", "third"},
    "retry/2": {"flagged", "old_flagged", "third"},
    "retry/3": {"flagged", "old_flagged"},
    "retry/4": {"flagged", "old_flagged"},
}


def _scan(policy: str, chunked: bool = True) -> ResumeScan:
    ids = [*DONE, "failed"]  # a row that is not done is never looked at
    on_budget = [v[0] for v in DONE.values()] + ["retry/3"]
    attempts = [v[1] for v in DONE.values()] + [3]
    hit = [v[2] for v in DONE.values()] + [True]
    records = pa.table({"id": ids, "on_budget": on_budget, "attempts": attempts,
                        "hit_frame_budget": hit})  # fmt: skip
    valid = pa.table({"id": ids})
    if chunked:  # as a real run reads them: columns in several chunks
        valid = pa.concat_tables([valid.slice(0, 3), valid.slice(3)])
        records = pa.concat_tables([records.slice(0, 4), records.slice(4)])
    resume = ResumeScan(done=np.array([True] * len(DONE) + [False]),
                        stale=pa.array([], pa.string()),
                        record_at=pa.array(range(len(ids)), pa.int64()))  # fmt: skip
    return recheck_budget(resume, valid, records, policy)


@pytest.mark.parametrize("policy", sorted(REDONE))
def test_each_policy_redoes_only_the_rows_it_would_keep_other_codes_for(policy):
    got = _scan(policy)
    redone = set(got.stale.to_pylist())
    assert redone == REDONE[policy]
    ids = [*DONE, "failed"]
    assert [i for i, d in zip(ids, got.done, strict=True) if d] == [
        i for i in DONE if i not in redone]  # fmt: skip
    # the reasons name the recorded policy (a record without one as ok) and count its rows
    want: dict[str, int] = {}
    for i in redone:
        was = DONE[i][0] or "ok"
        want[f"on-budget {was} -> {policy}"] = want.get(f"on-budget {was} -> {policy}", 0) + 1
    assert got.reasons == want


def test_whole_arrays_work_as_chunked_ones():
    got = _scan("retry/2", chunked=False)
    assert set(got.stale.to_pylist()) == REDONE["retry/2"]
