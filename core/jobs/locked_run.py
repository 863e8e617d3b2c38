"""The locked part of a job: resume filter, synthesis loop, writing, journal, results, summary.

Runs with OUT/.qtts.lock held. Batches go to the synthesizer one at a time; each finished utterance
is handed to the writer pool at once and journalled by the writer just before its file appears
(qtts.core.jobs.journal explains why); failed rows are journalled at once. Whatever happens (signal,
disk full, too many failures, a crash), writes in flight are settled and results.parquet +
metadata.jsonl are rebuilt from the journal before returning or raising.
Knows requests, utterances and records; no tensors, no CLI.
Over 300 lines: one class whose settle-on-any-exit invariant spans all its methods.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import deque
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qtts.core.jobs.budget import longest_first
from qtts.core.jobs.interfaces import NoProgress, ProgressSink
from qtts.core.jobs.interrupt import Interrupted, StopSignals
from qtts.core.jobs.journal import (
    AudioInfo,
    Journal,
    failed_record,
    ok_record,
    pending_record,
    read_journals,
)
from qtts.core.jobs.results import rebuild_views, result_records
from qtts.core.jobs.shards import UNSHARDED, Shard
from qtts.core.jobs.spec import JobSpec
from qtts.core.jobs.summary import JobSummary
from qtts.core.jobs.writer import (
    OutputWriter,
    WriteJob,
    audio_decodes,
    cleanup_temp_files,
    fsync_dir,
    row_id_of,
)
from qtts.core.jobs.writer import remove_live_temps as _remove_live_temps
from qtts.core.synthesis.requests import Request, RowFailure, Utterance

log = logging.getLogger("qtts")

WRITE_BATCH = 16  # rows per write batch when the batch size is planned (--batch-size auto)
MAX_BATCHES_IN_FLIGHT = 2  # batches written but not yet journalled: bounds audio held in memory


@dataclass
class _Batch:
    """One batch's file writes; bounds how much audio waits in memory for the disk."""

    writes: list[tuple[Future, str]] = field(default_factory=list)  # (future, row id)
    closed: bool = False  # every row of it has come back from the synthesizer
    count: int = 0  # results accepted into it (ok or failed)

    def ready(self) -> bool:
        return self.closed and all(f.done() for f, _ in self.writes)


def utterance_error(utt: Utterance, req: Request, on_budget: str) -> str | None:
    """Why an utterance fails its row after synthesis (None: it is fine)."""
    if not np.all(np.isfinite(utt.audio)):
        return "non-finite audio (NaN or inf) from the vocoder"
    if utt.hit_frame_budget:
        budget = f"max_new_tokens {req.max_new_tokens}, {len(utt.codes)} frames"
        if on_budget == "fail":
            return f"hit the frame budget without EOS ({budget}; --on-budget fail)"
        log.debug("row %s hit the frame budget without EOS (%s)", req.id, budget)
    return None


class JobRun:
    """rows: this shard's rows (all of them, unsharded); all_rows: the whole input, which the
    rebuilt results.parquet covers."""

    def __init__(self, spec: JobSpec, text_model, rows, validated, options, load_synthesizer,
                 progress: ProgressSink | None, shard: Shard = UNSHARDED,
                 all_rows=None) -> None:  # fmt: skip
        self.spec, self.text_model, self.rows, self.validated = spec, text_model, rows, validated
        self.options, self.load_synthesizer = options, load_synthesizer
        self.progress = progress or NoProgress()
        self.shard, self.all_rows = shard, rows if all_rows is None else all_rows
        self.out = spec.out_dir
        self.journal = Journal(self.out, shard.journal_name)
        self.run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.skipped: dict[str, dict[str, Any]] = {}
        self.failures = len(validated.rejected)
        self.audio_s = 0.0
        self.aborted = False
        self.t0 = time.monotonic()

    # -- the run ---------------------------------------------------------------------------------
    def execute(self) -> JobSummary:
        with StopSignals(on_exit_now=_remove_live_temps) as stop:
            self.stop = stop
            if cleanup_temp_files(self.out, owns=self._owns_file):
                log.info("removed temp files left by an interrupted run")
            if self.spec.overwrite:
                self.journal.reset()
            previous = {} if self.spec.overwrite else read_journals(self.out)
            self.journal.append(
                [self._failed(row, reason) for row, reason in self.validated.rejected]
            )
            todo = self._resume_filter(previous)
            status, code = "done", 0
            try:
                self._run(todo)
            except Interrupted as e:
                status, code = "interrupted", e.exit_code
            except BaseException:
                self.progress.close()
                self._finish_after_error()
                raise
            self.progress.close()
            summary = self._finish()
            if status == "done" and self.aborted:
                status = "aborted"
            summary.status = status
            summary.exit_code = code or (3 if summary.failed or summary.pending else 0)
            return summary

    def _begin(self, todo: list[Request]) -> bool:
        """Start progress; False when there is nothing to synthesize (or too many failed)."""
        self.progress.start(len(todo))
        if self._too_many_failures():
            self.aborted = True
            return False
        return bool(todo)

    def _run(self, todo: list[Request]) -> None:
        if not self._begin(todo):
            return
        # One stream, longest first: the synthesizer keeps --batch-size slots busy and refills each
        # as it frees (continuous batching), so it gets the whole sorted job in a single call.
        order = longest_first(todo, self.validated.estimated_frames)
        with self.stop.interruptible():
            synth = self.load_synthesizer(
                self.text_model, self.spec.device, self.spec.dtype, self.spec.batch_size
            )
        self.writer = OutputWriter(self.out, self.spec.audio_format)
        self.inflight: deque[_Batch] = deque()
        try:
            self._synthesize_stream(synth, order)
        finally:
            for b in self.inflight:
                b.closed = True  # a stream cut short: journal what did finish
            try:
                self._drain(block=True)
            finally:
                self.writer.close()

    def _synthesize_stream(self, synth, order: list[Request]) -> None:
        """Results come back in completion order; every --batch-size of them close a write batch,
        which bounds the audio waiting for the disk and surfaces write errors (disk full) early."""
        waiting = {r.id: r for r in order}
        current = self._open_batch()
        items = synth.synthesize(order, self.options)
        try:
            while True:
                with self.stop.interruptible():
                    item = next(items, None)
                if item is None:
                    break
                self._accept(item, waiting, current)
                current.count += 1
                if current.count >= (self.spec.batch_size or WRITE_BATCH):
                    current.closed = True
                    self._drain(block=len(self.inflight) > MAX_BATCHES_IN_FLIGHT)
                    current = self._open_batch()
                else:
                    self._drain(block=False)
                if self._too_many_failures():
                    self.aborted = True
                    return  # the rest stays pending
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        for r in waiting.values():  # a synthesizer bug, not the row's fault; still, say so
            self.journal.append([self._failed(r, "synthesizer returned no result for this row")])
            self.failures += 1
        current.closed = True
        self._drain(block=False)

    def _open_batch(self) -> _Batch:
        batch = _Batch()
        self.inflight.append(batch)
        return batch

    def _accept(self, item: Utterance | RowFailure, waiting: dict[str, Request], b: _Batch) -> None:
        req = waiting.pop(item.id, None)
        if req is None:
            raise RuntimeError(f"synthesizer returned an unexpected id {item.id!r}")
        if isinstance(item, RowFailure):
            error = item.error
        else:
            error = utterance_error(item, req, self.spec.on_budget)
        if error is not None:
            self.journal.append([self._failed(req, error)])
            self.failures += 1
            self.progress.advance(1, 0.0)
            return
        rec = self._ok(req, item)
        codes = item.codes if self.spec.save_codes else None
        job = WriteJob(req.id, item.audio, item.sample_rate, codes,
                       before_replace=lambda: self.journal.append([rec]))  # fmt: skip
        b.writes.append((self.writer.submit(job), req.id))
        self.audio_s += rec["duration_s"]
        self.progress.advance(1, rec["duration_s"])

    def _drain(self, *, block: bool) -> None:
        """Settle finished batches' writes, oldest first; raises file errors (disk full)."""
        while self.inflight:
            b = self.inflight[0]
            if not b.ready():
                if not (block and b.closed):
                    return
                wait([f for f, _ in b.writes])
            self.inflight.popleft()
            fatal = None
            for f, row_id in b.writes:
                if f.exception() is not None:
                    fatal = fatal or f.exception()
                    self._mark_pending(row_id)
            if b.writes:
                fsync_dir(self.out)  # make this batch's renames durable
            if fatal is not None:
                raise fatal

    def _mark_pending(self, row_id: str) -> None:
        """A write failed, perhaps after its journal line: the row is not done."""
        try:
            self.journal.append([pending_record(row_id, run=self.run_id)])
        except OSError as e:  # disk full: resume and results check the file anyway
            log.debug("could not journal %s as pending: %s", row_id, e)

    def _owns_file(self, final: str) -> bool:
        """Row files of this shard's rows, and its own journal (the shared views' temps are
        cleared under the results lock)."""
        row_id = row_id_of(final)
        if row_id is not None:
            return self.shard.owns(row_id)
        return final == self.journal.path.name

    def _too_many_failures(self) -> bool:
        limit = self.spec.max_failures
        return limit is not None and self.failures >= limit

    def _failed(self, r, error: str) -> dict[str, Any]:
        return failed_record(r, error, run=self.run_id, model=self.text_model.name)

    def _ok(self, req: Request, utt: Utterance) -> dict[str, Any]:
        file = f"{req.id}.{self.spec.audio_format}"
        return ok_record(req, AudioInfo.of(utt), file, run=self.run_id, model=self.text_model.name)

    def _resume_filter(self, previous: dict[str, dict[str, Any]]) -> list[Request]:
        todo = []
        for r in self.validated.requests:
            rec = previous.get(r.id)
            path = self.out / f"{r.id}.{self.spec.audio_format}"
            done = (
                rec is not None
                and rec.get("status") == "ok"
                and rec.get("file") == path.name
                and rec.get("text") == r.text
                and audio_decodes(path, rec.get("num_samples"))
            )
            if done:
                self.skipped[r.id] = {**rec, "status": "skipped", "row": r.row}
            else:
                todo.append(r)
        if self.skipped:
            log.info("resuming: %d row(s) already done, %d to do", len(self.skipped), len(todo))
        return todo

    # -- the end ---------------------------------------------------------------------------------
    def _finish(self) -> JobSummary:
        """Rebuild results.parquet and metadata.jsonl from every journal in the out dir (all
        shards): this run's rows as this run left them, other shards' as theirs did."""
        rejected = {row.row: reason for row, reason in self.validated.rejected}

        def records_for(latest):
            return result_records(
                self.out, self.all_rows, latest, owns=self.shard.owns, this_run=self.run_id,
                skipped=self.skipped,
                null_id=lambda row: self._failed(row, rejected.get(row.row, "id is null")),
            )  # fmt: skip

        records = rebuild_views(self.out, records_for)
        return self._summary([r for r in records if self.shard.owns(r["id"])])

    def _finish_after_error(self) -> None:
        try:
            self._finish()
        except Exception as e:  # the original error matters more; say why results are stale
            log.error("could not rebuild results.parquet: %s", e)

    def _summary(self, records: list[dict[str, Any]]) -> JobSummary:
        count = {s: sum(r["status"] == s for r in records) for s in ("ok", "failed", "skipped")}
        total = len(self.rows)
        hit = sum(bool(r["status"] == "ok" and r.get("hit_frame_budget")) for r in records)
        if hit:
            log.warning(
                "%d row(s) used their whole frame budget without EOS (kept; hit_frame_budget is "
                "true in results.parquet; --on-budget fail fails them)", hit,
            )  # fmt: skip
        return JobSummary(
            status="done", exit_code=0, total=total, **count,
            pending=total - sum(count.values()), hit_frame_budget=hit, audio_s=self.audio_s,
            wall_s=time.monotonic() - self.t0, out_dir=str(self.out),
            results=str(self.out / "results.parquet"),
        )  # fmt: skip
