"""The pass over one shard, its lock held: `LockedRun.execute` (docs/architecture.md, "One pass").
Whatever stops it (a signal, a full disk, too many failures, a crash), the shard's journal is
folded into its state and results.parquet rebuilt before it returns or raises.
Knows records and outcomes; no tensors, no CLI.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.contract.interfaces import NoProgress, ProgressSink, TextModel
from qtts.core.jobs.contract.spec import JobSpec
from qtts.core.jobs.execution.interrupt import Interrupted, StopSignals
from qtts.core.jobs.execution.summary import (
    FailureLog,
    JobSummary,
    RunEdges,
    hit_budget,
    made_now_s,
    moved_aside,
    time_split,
)
from qtts.core.jobs.output.recorder import Outcome, RecordContext
from qtts.core.jobs.output.results import rebuild, up_to_date
from qtts.core.jobs.output.stores import retract
from qtts.core.jobs.output.stores.open_store import StoreSpec, writer_prefix
from qtts.core.jobs.output.stores.presence import Listing, list_out_dir
from qtts.core.jobs.output.stores.repack import finish_killed, repack
from qtts.core.jobs.rows.validation import Prepared, spilled
from qtts.core.jobs.state import shard_state as state
from qtts.core.jobs.state.atomic_files import cleanup_temp_files, remove_live_temps
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.records import (
    FAILED,
    OK,
    SCAN_COLUMNS,
    pending_records,
    stamped,
    with_repeated_encoded,
)
from qtts.core.jobs.state.shard_state import UnreadableState
from qtts.core.jobs.state.shards import Shard
from qtts.core.jobs.work.budget import FRAME_S, FrameBudget
from qtts.core.jobs.work.chunks import Todo
from qtts.core.jobs.work.decide import Work, decide_work
from qtts.core.jobs.work.fingerprint import JobFingerprint, read_registry
from qtts.core.jobs.work.precision import Precision
from qtts.core.jobs.work.resume import aligned

log = logging.getLogger("qtts")

RESULTS_WAIT_S = 10  # another shard rebuilding results: leave it to them after this long
# What the summary counts from the shard's records ("run" and "duration_s" are there when this
# run journalled anything: a rerun that made nothing keeps the scan's columns)
FINISH_COLUMNS = ("id", "status", "hit_frame_budget", "run", "duration_s")


class Backend(Protocol):
    def prepare(self, stop: StopSignals) -> None:
        """Get ready to synthesize (load the model): before progress starts."""

    def outcomes(
        self, todo: Todo, journal: Journal, ctx: RecordContext, stop: StopSignals
    ) -> Iterator[Outcome]: ...


@dataclass
class RunSetup:
    """Everything one run of the job (on its shard) needs under the lock, prepared before it."""

    spec: JobSpec
    text_model: TextModel
    shard: Shard
    rows: pa.Table  # every input row (row, id, text): results cover them all
    prepared: Prepared  # this shard's rows, resolved and validated
    budget: FrameBudget
    settings: JobFingerprint
    inputs: list[Path]  # input files (results freshness)
    precision: Precision  # what it computes in and why (its cpu_auto: the pin)
    tries: int  # the tries worth making under retry (GenerationOptions.attempts)

    def decide(self, records: pa.Table, listing: Listing, registry: dict) -> Work:
        """What this run must do (work.decide)."""
        return decide_work(self.prepared, records, listing, model=self.text_model,
                           budget=self.budget, settings=self.settings, registry=registry,
                           output=self.spec.output, split=self.spec.split,
                           on_budget=self.spec.failures.key)  # fmt: skip


class LockedRun:
    """One run over its shard of the job, the shard's lock held: the pass, then the summary."""

    def __init__(
        self,
        setup: RunSetup,
        backend: Backend,
        progress: ProgressSink | None = None,
        called: float | None = None,  # time.monotonic() when run_job was called
    ) -> None:
        self.setup, self.backend = setup, backend
        self.spec, self.shard, self.out = setup.spec, setup.shard, setup.spec.output.out_dir
        self.progress = progress or NoProgress()
        self.run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.ctx = RecordContext(
            settings=setup.settings.digest,
            model=setup.text_model.name,
            run=self.run_id,
            on_budget=setup.spec.failures.key,
            tries=setup.tries,
            split=setup.spec.split.key,
            store=StoreSpec(
                layout=setup.spec.output.layout,
                audio_format=setup.spec.output.audio_format.value,
                save_codes=setup.spec.output.save_codes,
                shard_rows=setup.spec.output.shard_rows,
                prefix=writer_prefix(self.shard.suffix),
                run_tag=self.run_id.rsplit("-", 1)[-1],
            ),
            finish=setup.spec.finish,
        )
        self.journal = Journal(StatePaths(self.out).journal(self.shard.suffix))
        self.failures = FailureLog()
        self.aborted = False
        self.t0 = time.monotonic()
        self.edges = RunEdges(called=self.t0 if called is None else called, run=self.t0)
        self.repacked = pa.array([], pa.string())  # ids to move into this layout, no model
        self.load_s: float | None = None  # backend.prepare (the model's load)
        self.synthesis_s: float | None = None  # the outcome stream, first chunk to last write

    def execute(self) -> JobSummary:
        """One pass, then its end recorded (state folded, views rebuilt), whatever stopped it."""
        with StopSignals(on_exit_now=remove_live_temps) as stop:
            self._settle_killed_run()  # a killed run's half-done work; --overwrite
            work = self._scan_and_decide()  # rows -> work: done, to redo, to repack, to do
            self._record_work(work)  # rows to redo pending, rows failing validation failed
            stopped = None
            try:
                self._repack(work, stop)  # rows done in another layout moved, no model
                self._synthesize(work, stop)  # requests -> engine -> vocoder -> store
            except Interrupted as e:
                stopped = e
            except BaseException:
                self._finish_after_error()
                raise
            return self._finish(work, stopped)

    def _settle_killed_run(self) -> None:
        """What a killed run left half done (a retraction, a repack) is finished first; then
        --overwrite takes this shard's outputs out and forgets its state."""
        retract.finish(self.out, self.shard.suffix, self.journal, self.run_id)
        finish_killed(self.out, self.shard.suffix, self.journal)
        if self.spec.output.overwrite:
            self._retract_everything()
            self.ctx.store.fmt.unlist(self.out)  # each row's is made again
            state.reset(self.out, self.shard)

    def _scan_and_decide(self) -> Work:
        """Read this shard's records, clear what a killed run left half-written, decide the work."""
        # The texts of a big job off the heap: deciding the work reads digests, not texts.
        prepared = self.setup.prepared
        prepared.rows = spilled(prepared.rows, StatePaths(self.out).dir)
        records = state.read_own(self.out, self.shard, SCAN_COLUMNS)
        self.records = with_repeated_encoded(records)
        del records
        self._warn_rows_left_the_input()
        listing = list_out_dir(self.out)
        if self.ctx.store.clear_temps(self.out, listing, owns_row=self.shard.owns):
            log.info("removed temp files left by an interrupted run")
        paths = StatePaths(self.out)
        suffix = self.shard.suffix
        own = {paths.state(suffix).name, paths.retract_intent(suffix).name}
        cleanup_temp_files(
            paths.dir, owns=lambda final: final in own or paths.is_repack_intent(final, suffix)
        )
        return self.setup.decide(self.records, listing, read_registry(self.out))

    def _warn_rows_left_the_input(self) -> None:
        """Rows done by earlier runs whose ids the input has no more (a manifest cut short, rows
        taken out of it): their outputs stay, unlisted. Said, never acted on: a truncated input
        must not cost a dataset its audio."""
        ids = self.records["id"]  # two columns read, no table copied (a million records)
        gone = pc.and_(
            pc.equal(self.records["status"], OK),
            pc.invert(pc.is_in(ids, value_set=self.setup.rows["id"])),
        )
        count = pc.sum(pc.fill_null(gone, False)).as_py() or 0
        if count:
            log.warning(
                "%d row(s) done by earlier runs are no longer in the input (first: %s): their "
                "audio stays in the out dir (its files or archive shards), listed by neither "
                "results.parquet nor metadata.jsonl; a loader reading the files or shards "
                "directly still sees it",
                count,
                ids.filter(gone)[0],
            )

    def _record_work(self, work: Work) -> None:
        """Journal what is decided before synthesis: rows to redo lose their done status, rows
        failing validation are recorded (unless recorded so already: a rerun of a finished job
        writes nothing)."""
        if len(work.resume.stale):
            # First (stores/retract.py): rows still in archive shards come out, their records
            # made pending under the retraction's intent; the rest are made pending here.
            taken = self._retract(work.resume.stale, self.records)
            log.warning(
                "redoing %d row(s) done before whose output would change: %s",
                len(work.resume.stale),
                work.resume.describe(),
            )
            rest = work.resume.stale
            if len(taken):
                rest = pc.filter(rest, pc.invert(pc.is_in(rest, value_set=taken)))
            self.journal.append_table(pending_records(rest, run=self.run_id))
            if len(rest):  # their outputs are replaced by name as they are redone: never a view
                self.ctx.store.fmt.unlist(self.out)  # listing one gone after a kill
            # (pending first: a view another shard rebuilds meanwhile lists none of them)
        if work.skipped or work.moved:
            moved = f", {work.moved} to repack into {self.ctx.store.layout}" * bool(work.moved)
            log.info(
                "resuming: %d row(s) already done%s, %d to do",
                work.skipped,
                moved,
                work.todo.num_rows,
            )
        rejected = work.rejected
        old = aligned(rejected.select(["id"]), self.records.select(["id", "status", "error"]))
        was_ok = pc.fill_null(pc.equal(old["status"], OK), False)
        if pc.any(was_ok).as_py():  # done before, failing now (an emptied text, say): out first,
            # plain files too: nothing replaces them by name
            self._retract(failing_now(work, self.records), self.records, replaced=False)
        same = pc.and_(pc.equal(old["status"], FAILED), pc.equal(old["error"], rejected["error"]))
        fresh = rejected.filter(pc.invert(pc.fill_null(same, False)))
        fresh = fresh.filter(pc.is_valid(fresh["id"]))  # a null id has no record to key
        self.journal.append_table(stamped(fresh, status=FAILED, **self.ctx.stamp()))
        self.failures.add_table(rejected)

    def _retract(
        self, ids: pa.Array | pa.ChunkedArray, records: pa.Table, *, replaced: bool = True
    ) -> pa.Array:
        """The ids taken out of their outputs (now pending); replaced: this run makes them again,
        so files it replaces by name stay until then."""
        old = aligned(pa.table({"id": ids}), records.select(["id", "file"]))
        return retract.retract(
            self.out,
            self.shard.suffix,
            self.journal,
            self.run_id,
            ids=ids,
            locations=old["file"],
            layout=self.ctx.store.layout if replaced else None,
        )

    def _retract_everything(self) -> None:
        """--overwrite: this shard's rows come out of their outputs before its state goes, but
        those this run's layout replaces by name (retract.taken_out)."""
        ok = overwritten(self.out, self.shard)
        self._retract(ok["id"], ok)

    def _repack(self, work: Work, stop: StopSignals) -> None:
        """Rows done in another layout or format move into this run's, before any synthesis
        (and without loading the model when nothing else is to do)."""
        ids = work.moved_ids()
        if len(ids) == 0:
            return
        self.repacked = ids
        self.records = None  # the scan's columns of every row: the repack reads what it needs
        pa.default_memory_pool().release_unused()
        store = self.ctx.store
        repack(self.out, self.shard.suffix, self.journal, ids, spec=store,
               settings=self.ctx.settings, run=self.run_id, stop=stop)  # fmt: skip

    def _synthesize(self, work: Work, stop: StopSignals) -> None:
        """The rows to do through the backend, each outcome counted as it lands; too many
        failures stop it."""
        if self._too_many_failures():
            self.aborted = True
            return
        if work.todo.num_rows == 0:
            return
        start = self.edges.load = time.monotonic()
        self.backend.prepare(stop)
        self.edges.synthesis = time.monotonic()
        self.load_s = self.edges.synthesis - start
        self.progress.start(work.todo.num_rows, float(work.todo.est_frames.sum()) * FRAME_S)
        start = time.monotonic()
        outcomes = self.backend.outcomes(work.todo, self.journal, self.ctx, stop)
        try:
            for outcome in outcomes:
                if outcome.status != OK:
                    self.failures.add(outcome.id, None, outcome.error or "failed")
                self.progress.advance(1, outcome.duration_s, outcome.id)
                if self._too_many_failures():
                    self.aborted = True
                    return  # the rest stays pending
        finally:
            outcomes.close()
            self.edges.written = time.monotonic()
            self.synthesis_s = self.edges.written - start

    def _too_many_failures(self) -> bool:
        limit = self.spec.failures.max_failures
        return limit is not None and self.failures.count >= limit

    # -- the end ---------------------------------------------------------------------------------
    def _finish(self, work: Work, stopped: Interrupted | None) -> JobSummary:
        """Fold the journal into the state, rebuild the shared views, count this shard's rows."""
        self.progress.close()
        self.failures.close()
        folded = state.compact(self.out, self.shard, ()) is not None
        # Only the shard's ids are counted from here: the rest of its rows (and the scan's
        # columns, when this run journalled) go before the views' rebuild holds a column of
        # every row itself (ten million rows: docs/scale.md)
        own = self.setup.prepared.rows.select(["id"])
        self.setup.prepared.rows = own
        records = None if folded else self.records  # nothing journalled: the scan's columns
        self.records = None
        pa.default_memory_pool().release_unused()
        self._rebuild_results()
        if records is None:
            records = state.read_own(self.out, self.shard, FINISH_COLUMNS)
        counted = [c for c in FINISH_COLUMNS if c in records.column_names]
        mine = aligned(own, records.select(counted))
        done = pc.sum(pc.equal(mine["status"], OK)).as_py() or 0
        repacked, mine = moved_aside(mine, self.repacked, self.run_id)
        failed = (pc.sum(pc.equal(mine["status"], FAILED)).as_py() or 0) + (
            pc.sum(pc.is_null(own["id"])).as_py() or 0
        )
        # Rows chosen to move but still where they were (unreadable audio, or a signal or a
        # full disk stopped the repack before them) were done before: skipped, never made now.
        skipped = work.skipped + len(self.repacked) - repacked
        pending = work.total - done - failed
        if stopped is not None:
            status, code = "interrupted", stopped.exit_code
        else:
            status, code = ("aborted" if self.aborted else "done"), 0
        return JobSummary(
            status=status,
            exit_code=code or (3 if failed or pending else 0),
            total=work.total,
            ok=done - skipped - repacked,
            failed=failed,
            skipped=skipped,
            repacked=repacked,
            pending=pending,
            hit_frame_budget=hit_budget(mine, self.run_id),
            audio_s=made_now_s(mine, self.run_id),
            wall_s=time.monotonic() - self.t0,
            out_dir=str(self.out),
            results=str(self.out / "results.parquet"),
            failure_reasons=self.failures.top(),
            load_s=self.load_s,
            synthesis_s=self.synthesis_s,
            writing=self._writing(),
            synthesis=self._synthesis(),
            shard=self.shard.describe(),
            time_split=self._time_split(),
        )

    def _time_split(self) -> dict:
        """Where the run's time went (summary.time_split), the clock's one-time work and last step
        included where the local backend ran."""
        clock = getattr(getattr(self.backend, "synth", None), "clock", None)
        one_time = 0.0
        if clock is not None and clock.passes:
            self.edges.last_step = clock.last_step_at
            one_time = clock.one_time_s
        return time_split(self.edges, time.monotonic(), one_time)

    def _writing(self):
        """What the backend's writers cost this run (logged), or None (Ray, nothing to do)."""
        writing = getattr(self.backend, "writing", None)
        if writing is not None:
            log.info("%s", writing.describe())
        return writing

    def _synthesis(self) -> dict | None:
        """Where the synthesizer's time went (its clock, logged), or None (Ray, nothing run)."""
        clock = getattr(getattr(self.backend, "synth", None), "clock", None)
        if clock is None or not clock.passes:
            return None
        log.info("synthesis: %s", clock.describe())
        return clock.row()

    def _rebuild_results(self) -> None:
        if up_to_date(self.out, self.setup.inputs):
            return
        try:
            counts = rebuild(self.out, self.setup.rows, wait_s=RESULTS_WAIT_S)
        except UnreadableState as e:  # another shard's state: this run's rows are safe in its own
            log.error("%s", e)
            return
        if counts is None:
            log.info(
                "results.parquet is being rebuilt by another shard, which will include "
                "this one's rows (or run `qtts results %s`)",
                self.out,
            )

    def _finish_after_error(self) -> None:
        """The pass raised: fold the state and rebuild results (the error is raised after)."""
        self.progress.close()
        try:
            state.compact(self.out, self.shard)
            self._rebuild_results()
        except Exception as e:  # the original error matters more; say why results are stale
            log.error("could not update the job state or results.parquet: %s", e)


def failing_now(work: Work, records: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The ids done before that fail validation now (an emptied text, say): their outputs go."""
    old = aligned(work.rejected.select(["id"]), records.select(["id", "status"]))
    return pc.filter(work.rejected["id"], pc.fill_null(pc.equal(old["status"], OK), False))


def overwritten(out: Path, shard: Shard) -> pa.Table:
    """--overwrite: the shard's ok records (id, file), whose outputs may need taking out first."""
    records = state.read_own(out, shard, ("id", "status", "file", "run", "t"))
    return records.filter(pc.fill_null(pc.equal(records["status"], OK), False))
