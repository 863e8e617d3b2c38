"""The resume rule for the frame-budget policy: a done row is redone only when this run's policy
would keep other codes for it.

The policy (--on-budget ok | fail | retry with --max-attempts N) is not in the job settings
digest: it shapes only the rows that hit their frame budget. Each record keeps the policy it ran
under (its `on_budget` key: ok, fail or retry/N), whether its kept codes hit the budget and the
attempts it took (a split row: the most any segment took). Attempts are deterministic (each try's
seed derives from the row's), so what a policy keeps follows from those columns:
- a row that stopped by EOS at its first try: every policy keeps it;
- a row kept at try k > 1 (under retry/M): retry/N keeps it for N >= k;
- a row kept flagged at its first try (under ok): ok keeps it.
Every other done row is redone. A record without a key was made before qtts retried, under ok
or fail: it counts as ok (a flagged row was made under ok; a row that stopped is kept anyway).
So switching a job to retry redoes its flagged rows only, and changing N redoes only the rows
that needed more tries than the new N allows.
Knows record columns and the policy's key; no files, no models.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.work.resume import ResumeScan

LEGACY_KEY = "ok"  # a record made before the policy was recorded (see above)


def recheck_budget(resume: ResumeScan, valid: pa.Table, records: pa.Table, key: str) -> ResumeScan:
    """resume with the done rows whose kept codes `key`'s policy would not keep moved to
    stale, with a reason ("on-budget ok -> retry/3"). valid: this run's valid rows (resume's
    order); records: the shard's latest records."""
    at = np.flatnonzero(resume.done)
    if len(at) == 0 or resume.record_at is None:
        return resume
    index = resume.record_at.take(pa.array(at))
    # The usual rerun, decided on booleans: no copy of ten million keys.
    same = pc.equal(records["on_budget"], key)
    if pc.all(pc.fill_null(same, LEGACY_KEY == key).take(index)).as_py():
        return resume
    keys = _one(pc.fill_null(records["on_budget"].take(index), LEGACY_KEY))
    attempts = _numpy(pc.fill_null(records["attempts"].take(index), 1))
    hit = _numpy(pc.fill_null(records["hit_frame_budget"].take(index), False))
    changed = _numpy(pc.not_equal(keys, key)) & ~kept_by(key, attempts, hit)
    if not changed.any():
        return resume
    reasons = pc.value_counts(pc.filter(keys, pa.array(changed))).to_pylist()
    resume.done[at[changed]] = False
    more = valid["id"].take(pa.array(at[changed]))
    resume.stale = pa.concat_arrays([_one(resume.stale), _one(more)])
    resume.reasons.update({f"on-budget {r['values']} -> {key}": r["counts"] for r in reasons})
    return resume


def kept_by(key: str, attempts: np.ndarray, hit: np.ndarray) -> np.ndarray:
    """Whether the policy `key` keeps each row's recorded codes, from the try they came from
    (attempts, int [n]) and whether they hit the budget (bool [n])."""
    policy, _, limit = key.partition("/")
    if policy == "retry":
        return ~hit & (attempts <= int(limit))
    if policy == "ok":
        return attempts == 1  # stopped or flagged: the first try is what ok keeps
    return (attempts == 1) & ~hit  # fail


def _numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return _one(column).to_numpy(zero_copy_only=False)


def _one(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
