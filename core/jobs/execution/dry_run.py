"""`--dry-run`: what a run decides before synthesis (rows to make, skip, repack, redo or fail; the
first chunk's memory plan and splits; what would come out of archive shards first), reported as
the usual one-line JSON instead of done. Loads no weights, writes nothing, and refuses what the
run would refuse at its out dir and locks, with the same exit code. Knows the job's work and the
TextModel; no tensors.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.execution.locked_run import RunSetup, failing_now, overwritten
from qtts.core.jobs.execution.out_dir import check_out_dir
from qtts.core.jobs.output.stores.presence import list_out_dir
from qtts.core.jobs.output.stores.retract import outputs_touched, taken_out
from qtts.core.jobs.state import shard_state as state
from qtts.core.jobs.state.jobfile import read_job_file
from qtts.core.jobs.state.lock import LockHeldError, check_no_old_run, holder_pid, lock_is_held
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.records import SCAN_COLUMNS, empty, with_repeated_encoded
from qtts.core.jobs.work.budget import FRAME_S
from qtts.core.jobs.work.chunks import CHUNK_ROWS, Chunk, chunk_requests, planned_frames
from qtts.core.jobs.work.decide import Work
from qtts.core.jobs.work.fingerprint import read_registry
from qtts.core.jobs.work.resume import aligned

log = logging.getLogger("qtts")

FIRST_FAILURES = 5


@dataclass
class DryRunSummary:
    total: int
    to_synthesize: int
    skipped: int
    to_repack: int  # rows done in another layout or format, moved without synthesis
    redo: int
    redo_reasons: dict[str, int]
    failed: int
    first_failures: list[dict[str, Any]]
    est_frames: int
    memory_plan: str
    split_rows: int  # rows of the first (longest) chunk cut into segments
    segments: int  # the segments they make
    taken_out: int  # rows whose outputs come out before they are redone (stores/retract.py)
    outputs_rewritten: int  # the shards (or files) that rewrites or removes
    shard: str
    precision: str  # what the run would compute in, as in the fingerprint: "cpu:bfloat16"
    wall_s: float
    status: str = "dry-run"
    exit_code: int = 0
    failure_reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["est_audio_hours"] = round(self.est_frames * FRAME_S / 3600, 3)
        d["wall_s"] = round(self.wall_s, 3)
        return d

    def describe(self) -> str:
        hours = self.est_frames * FRAME_S / 3600
        split = f" ({self.split_rows} split into {self.segments} segments)" * bool(self.split_rows)
        out = (
            f", {self.taken_out} taken out of {self.outputs_rewritten} output file(s) first"
            * bool(self.taken_out)
        )
        repack = f", {self.to_repack} to repack (no synthesis)" * bool(self.to_repack)
        why = ", ".join(f"{reason} ({n})" for reason, n in self.redo_reasons.items())
        redo = f"{self.redo} to redo" + f" ({why})" * bool(self.redo and why)
        return (
            f"dry run: {self.to_synthesize} row(s) to synthesize{split} (about {hours:.2f} h "
            f"of audio), {self.skipped} already done{repack}, {redo}{out}, "
            f"{self.failed} failing validation; nothing was written"
        )


def refuse_as_the_run_would(setup: RunSetup) -> None:
    """The run's out dir and lock checks, in its order, asked without creating a file or taking
    a lock: raises LockHeldError (75) or UsageError (2) with the run's own line."""
    out = setup.spec.output.out_dir
    paths = StatePaths(out)
    check_out_dir(paths.dir)  # before any read: under a file, every read fails oddly
    own = paths.lock(setup.shard.suffix)
    if lock_is_held(own):
        raise LockHeldError(own, holder_pid(own))
    recorded = read_job_file(out, legacy_ok=setup.spec.output.overwrite)
    if recorded is not None and recorded.num_shards != setup.shard.count:  # only --overwrite
        check_no_old_run(paths, recorded.num_shards)


def dry_run(setup: RunSetup) -> DryRunSummary:
    """Reads the out dir if it exists; writes nothing anywhere."""
    t0 = time.monotonic()
    spec, out = setup.spec, setup.spec.output.out_dir
    fresh = spec.output.overwrite
    # the scan's columns as the run holds them (repeated strings encoded: docs/scale.md)
    records = empty() if fresh else state.read_own(out, setup.shard, SCAN_COLUMNS)
    records = with_repeated_encoded(records)
    work = setup.decide(records, list_out_dir(out), read_registry(out))
    plan, first = _first_chunk_plan(setup, work)
    locations = _taken_out(setup, work, records)
    split_rows = {place[0]: place[2] for place in first.split.place.values()} if first else {}
    failures = work.rejected.select(["row", "id", "error"])
    failures = pa.concat_tables([failures, _cut_failures(first, failures.schema)])
    reasons = pc.value_counts(failures["error"]).to_pylist()
    reasons.sort(key=lambda r: -r["counts"])
    return DryRunSummary(
        total=work.total,
        to_synthesize=work.todo.num_rows - (len(first.split.failed) if first else 0),
        skipped=work.skipped,
        to_repack=work.moved,
        redo=len(work.resume.stale),
        redo_reasons=work.resume.reasons,
        failed=failures.num_rows,
        first_failures=failures.slice(0, FIRST_FAILURES).to_pylist(),
        est_frames=planned_frames(work.todo, first),
        memory_plan=plan,
        split_rows=len(split_rows),
        segments=sum(split_rows.values()),
        taken_out=len(locations),
        outputs_rewritten=outputs_touched(locations),
        shard=setup.shard.describe(),
        precision=setup.settings.values["precision"],
        wall_s=time.monotonic() - t0,
        failure_reasons={r["values"]: r["counts"] for r in reasons[:FIRST_FAILURES]},
    )


def _taken_out(setup: RunSetup, work: Work, records: pa.Table) -> pa.ChunkedArray:
    """The locations the run would take out of its outputs before redoing their rows, chosen as
    locked_run chooses them: every ok row under --overwrite, else the rows to redo and the rows
    done before that fail validation now (their plain files too)."""
    out, layout = setup.spec.output.out_dir, setup.spec.output.layout
    if setup.spec.output.overwrite:
        locations = overwritten(out, setup.shard)["file"]
        return locations.filter(taken_out(locations, layout))
    where = records.select(["id", "file"])
    redo = aligned(pa.table({"id": _flat(work.resume.stale)}), where)["file"]
    failing = aligned(pa.table({"id": _flat(failing_now(work, records))}), where)["file"]
    # rows failing now are made by nothing: their plain files go too
    return pa.chunked_array(
        [
            *redo.filter(taken_out(redo, layout)).chunks,
            *failing.filter(taken_out(failing, None)).chunks,
        ],
        pa.string(),
    )


def _flat(ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    return ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids


def _cut_failures(first: Chunk | None, schema: pa.Schema) -> pa.Table:
    """The first chunk's rows that fail as it is cut (a segment still too long for the model,
    the splitter finding no cut): the run fails them before synthesis, so they count here."""
    failed = first.split.failed if first is not None else {}
    rows = [{"row": first.rows[i]["row"], "id": i, "error": e} for i, e in failed.items()]
    return pa.Table.from_pylist(rows, schema=schema)


def _first_chunk_plan(setup: RunSetup, work: Work) -> tuple[str, Chunk | None]:
    """The memory plan of the longest rows (the chunk that must fit), and that chunk."""
    if work.todo.num_rows == 0:
        return "nothing to plan", None
    spec = setup.spec
    rows = next(work.todo.slices(CHUNK_ROWS))
    first = chunk_requests(rows, setup.text_model, setup.budget, spec.split)
    m = spec.model
    plan = setup.text_model.memory_plan(first.requests, m.placement)
    return plan, first
