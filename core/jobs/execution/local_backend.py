"""The local backend: this process synthesizes the rows a chunk at a time (run_chunk, the loop each
Ray actor runs too) while the output store's threads write them; at most MAX_WRITES_IN_FLIGHT wait
for the disk, and a write error (disk full) surfaces at the next row. Closed early (an abort, a
signal), it lets the writes in flight finish: they journal themselves. What the writing cost is left
in `writing`. with_segment_progress: each segment of a split row reaches the ProgressSink as it is
made, so a row of hundreds of segments does not read `0/7 rows ... ETA ?` for minutes. Knows chunks,
requests, the synthesizer protocol and the recorder; no tensors.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from qtts.core.jobs.contract.interfaces import LoadSynthesizer, ProgressSink, Synthesizer, TextModel
from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.execution.interrupt import StopSignals
from qtts.core.jobs.long_text.segments import row_of_segment, synthesize_chunk
from qtts.core.jobs.output.recorder import Outcome, RecordContext, RowRecorder
from qtts.core.jobs.output.stores.open_store import writer_threads
from qtts.core.jobs.output.writer import WriterClock, WritingReport
from qtts.core.jobs.state.atomic_files import fsync_dir
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.jobs.work.chunks import Chunk, Todo, chunks
from qtts.core.synthesis.requests import (
    GenerationOptions,
    Placement,
    Request,
    RowFailure,
    Utterance,
)

log = logging.getLogger("qtts")

MAX_WRITES_IN_FLIGHT = 64
FSYNC_EVERY = 16  # published files per directory fsync (the journal already has their lines)


@dataclass
class LocalBackend:
    out_dir: Path
    text_model: TextModel
    load_synthesizer: LoadSynthesizer
    placement: Placement
    options: GenerationOptions
    budget: FrameBudget
    split: SplitOptions | None = None  # long rows cut into segments (None: every row whole)
    synth: Synthesizer | None = None  # loaded by prepare()
    writing: WritingReport | None = None  # what the last outcome stream's writing cost

    def prepare(self, stop: StopSignals) -> None:
        # The device --device auto picked (cuda or cpu), not "auto"
        device = self.placement.device.strip().lower()
        where, _, _ = self.text_model.resolve_precision(device, self.placement.dtype)
        if device.startswith("cuda:"):
            where = device
        log.info("loading %s on %s", self.text_model.name, where)
        with stop.interruptible():
            self.synth = self.load_synthesizer(self.text_model, self.placement)

    def outcomes(
        self, todo: Todo, journal: Journal, ctx: RecordContext, stop: StopSignals
    ) -> Iterator[Outcome]:
        synth = self.synth
        writes = WriteQueue(self.out_dir)
        clock, threads = WriterClock(), writer_threads()
        store = ctx.store.open(self.out_dir, journal, workers=threads, clock=clock)
        recorder = RowRecorder(store, journal, ctx)
        self.writing = report = WritingReport(threads)
        drained = None  # when synthesis ended: what follows is the writers' tail
        guard = stop.interruptible
        try:
            # each chunk's utterances (engine, vocoder) go to the writers as they finish, each
            # outcome yielded once its write settles (a failure at once)
            for chunk in chunks(todo, self.text_model, self.budget, split=self.split):
                for result in run_chunk(synth, chunk, self.options, recorder, guard=guard):
                    if isinstance(result, Outcome):
                        yield result
                    else:
                        writes.add(result)
                    yield from writes.settled(block=len(writes) > MAX_WRITES_IN_FLIGHT)
            drained = time.perf_counter()
            report.wait_s = writes.waited_s
            yield from writes.settled(block=True, every=True)
        finally:
            writes.close()
            store.close()  # an archive seals its open shard: its rows become durable
            if drained is None:  # cut short: every wait counts as a wait
                report.wait_s = writes.waited_s
            else:
                report.drain_s = time.perf_counter() - drained
            report.dir_fsync_s, report.busy_s = writes.fsync_s, clock.busy()


def run_chunk(
    synth: Synthesizer,
    chunk: Chunk,
    options: GenerationOptions,
    recorder: RowRecorder,
    guard: Callable[[], AbstractContextManager] = nullcontext,
) -> Iterator[Outcome | Future[Outcome]]:
    """Each row's outcome (or the future of one being written), in completion order. guard():
    the context each wait for the synthesizer runs in (the local backend's: signals may
    interrupt it)."""
    budgets = dict(chunk.budgets)
    items = synthesize_chunk(synth, chunk, options, recorder.ctx.on_budget)
    try:
        while True:
            with guard():
                item = next(items, None)
            if item is None:
                break
            if item.id not in budgets:
                raise RuntimeError(f"synthesizer returned an unexpected id {item.id!r}")
            yield recorder.finish(item, chunk.rows[item.id], budgets.pop(item.id))
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
    for row_id in budgets:  # a synthesizer bug, not the row's fault; still, say so
        yield recorder.failed(chunk.rows[row_id], "the synthesizer returned no result")


class WriteQueue:
    """Writes in flight, settled oldest first."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.inflight: deque[Future[Outcome]] = deque()
        self.unsynced = 0
        self.waited_s = 0.0  # blocked on a write not yet done
        self.fsync_s = 0.0  # in the out dir's fsyncs

    def __len__(self) -> int:
        return len(self.inflight)

    def add(self, future: Future[Outcome]) -> None:
        self.inflight.append(future)

    def settled(self, *, block: bool, every: bool = False) -> Iterator[Outcome]:
        """Finished writes' outcomes; block: wait for the oldest (every: for all). A failed
        write (disk full) raises: the row is not done (resume finds no file) and the job stops."""
        while self.inflight and (self.inflight[0].done() or block):
            oldest = self.inflight.popleft()
            if not oldest.done():
                start = time.perf_counter()
                wait([oldest])  # its exception, if any, is raised below
                self.waited_s += time.perf_counter() - start
            outcome = oldest.result()
            self.unsynced += 1
            if self.unsynced >= FSYNC_EVERY:
                self.sync()
            yield outcome
            block = every
        if every:
            self.sync()

    def sync(self) -> None:
        if self.unsynced:
            start = time.perf_counter()
            fsync_dir(self.out_dir)  # make the renames durable
            self.fsync_s += time.perf_counter() - start
            self.unsynced = 0

    def close(self) -> None:
        """Cut short: let the rows being written finish (they journal themselves)."""
        wait(list(self.inflight))
        self.inflight.clear()
        self.unsynced = 1
        self.sync()


def with_segment_progress(load: LoadSynthesizer, progress: ProgressSink | None) -> LoadSynthesizer:
    """The factory, its synthesizers reporting segments to `progress` (none: as it was)."""
    if progress is None:
        return load
    return lambda text_model, placement: SegmentReporting(load(text_model, placement), progress)


class SegmentReporting:
    """A Synthesizer that tells `progress` of each segment of a split row it yields."""

    def __init__(self, synth: Synthesizer, progress: ProgressSink) -> None:
        self.synth, self.progress = synth, progress

    @property
    def clock(self):
        """The wrapped synthesizer's SynthesisClock (where its time went), if it keeps one."""
        return getattr(self.synth, "clock", None)

    def synthesize(
        self, requests: Sequence[Request], options: GenerationOptions
    ) -> Iterator[Utterance | RowFailure]:
        items = self.synth.synthesize(requests, options)
        try:
            for item in items:
                row_id = row_of_segment(item.id)
                if row_id is not None and isinstance(item, Utterance):
                    self.progress.segment(row_id, len(item.audio) / item.sample_rate)
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:  # an early close reaches the real stream (frees the engine)
                close()
