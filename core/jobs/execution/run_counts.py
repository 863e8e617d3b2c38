"""What a finished run counts of its shard's rows, from their records: the audio it made, the
rows it kept at their frame budget (and the one warning about them), and the rows it repacked
rather than made (a repacked row's record is this run's, its audio an earlier run's).
Knows record columns; no files.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.state.records import OK

log = logging.getLogger("qtts")


def _made_now(mine: pa.Table, run_id: str) -> pa.Array:
    """Per row: whether this run made its record (False for a rerun that made nothing)."""
    if "run" not in mine.column_names:
        return pa.nulls(mine.num_rows, pa.bool_()).fill_null(False)
    return pc.fill_null(pc.equal(mine["run"], run_id), False)


def moved_aside(mine: pa.Table, repacked: pa.Array, run_id: str) -> tuple[int, pa.Table]:
    """(rows this run repacked, mine with their `run` cleared): a repacked row's record is this
    run's, but its audio was made before (not counted as made now, nor warned of again)."""
    if len(repacked) == 0 or "run" not in mine.column_names:
        return 0, mine
    moved = pc.and_(pc.fill_null(pc.is_in(mine["id"], value_set=repacked), False),
                    _made_now(mine, run_id))  # fmt: skip
    run = pc.if_else(moved, pa.scalar(None, mine["run"].type), mine["run"])
    at = mine.schema.get_field_index("run")
    return pc.sum(moved).as_py() or 0, mine.set_column(at, "run", run)


def made_now_s(mine: pa.Table, run_id: str) -> float:
    """Seconds of audio this run made, from its records: rows whose files were still being
    written when a signal stopped the outcome stream count too, as they do in `ok`."""
    if "duration_s" not in mine.column_names:
        return 0.0
    ok_now = pc.and_(pc.equal(mine["status"], OK), _made_now(mine, run_id))
    return pc.sum(pc.filter(mine["duration_s"], pc.fill_null(ok_now, False))).as_py() or 0.0


def hit_budget(mine: pa.Table, run_id: str) -> int:
    """The shard's ok rows kept at their frame budget (the summary's count); the warning names
    only those this run made, so a rerun that made nothing does not repeat it."""
    hit = pc.and_(pc.equal(mine["status"], OK), pc.fill_null(mine["hit_frame_budget"], False))
    n = pc.sum(hit).as_py() or 0
    now = pc.sum(pc.and_(hit, _made_now(mine, run_id))).as_py() or 0
    if now:
        log.warning(
            "%d row(s) used their whole frame budget without EOS (kept; hit_frame_budget "
            "is true in results.parquet; --on-budget retry tries them again, --on-budget "
            "fail fails them)",
            now,
        )
    return n
