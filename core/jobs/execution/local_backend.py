"""The local backend: this process synthesizes the rows, a chunk at a time, and writes them.

Yields one Outcome per row in completion order (the chunk loop it shares with the Ray
backend: qtts.core.jobs.execution.chunk_loop). Each finished utterance goes to the writer pool at
once (the output store: qtts.core.jobs.output.stores); at most MAX_WRITES_IN_FLIGHT wait for
the disk (bounding the audio held in memory) and a write error (disk full) surfaces at the next
row, not at the end. Closing the stream early (an
abort, a signal) still lets writes in flight finish: they journal themselves, so nothing finished
is lost. Knows chunks, the synthesizer protocol and the recorder; no tensors.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path

from qtts.core.jobs.execution.chunk_loop import run_chunk
from qtts.core.jobs.execution.interrupt import StopSignals
from qtts.core.jobs.interfaces import LoadSynthesizer, TextModel
from qtts.core.jobs.output.recorder import Outcome, RecordContext, RowRecorder
from qtts.core.jobs.output.writer import fsync_dir
from qtts.core.jobs.spec import SplitSettings
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.jobs.work.chunks import Chunk, Todo, chunks
from qtts.core.synthesis.requests import Placement

log = logging.getLogger("qtts")

MAX_WRITES_IN_FLIGHT = 64
FSYNC_EVERY = 16  # published files per directory fsync (the journal already has their lines)


@dataclass
class LocalBackend:
    out_dir: Path
    text_model: TextModel
    load_synthesizer: LoadSynthesizer
    placement: Placement
    options: object  # GenerationOptions
    budget: FrameBudget
    split: SplitSettings | None = None  # long rows cut into segments (None: every row whole)
    synth: object = None  # loaded by prepare()

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
        store = ctx.store.open(self.out_dir, journal)
        recorder = RowRecorder(store, journal, ctx)
        try:
            for chunk in chunks(todo, self.text_model, self.budget, split=self.split):
                yield from self._chunk(synth, chunk, recorder, writes, stop)
            yield from writes.settled(block=True, every=True)
        finally:
            writes.close()
            store.close()  # an archive seals its open shard: its rows become durable

    def _chunk(
        self, synth, chunk: Chunk, recorder: RowRecorder, writes: WriteQueue, stop: StopSignals
    ) -> Iterator[Outcome]:
        for result in run_chunk(synth, chunk, self.options, recorder, guard=stop.interruptible):
            if isinstance(result, Outcome):
                yield result
            else:
                writes.add(result)
            yield from writes.settled(block=len(writes) > MAX_WRITES_IN_FLIGHT)


class WriteQueue:
    """Writes in flight, settled oldest first."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.inflight: deque[Future[Outcome]] = deque()
        self.unsynced = 0

    def __len__(self) -> int:
        return len(self.inflight)

    def add(self, future: Future[Outcome]) -> None:
        self.inflight.append(future)

    def settled(self, *, block: bool, every: bool = False) -> Iterator[Outcome]:
        """Finished writes' outcomes; block: wait for the oldest (every: for all). A failed
        write (disk full) raises: the row is not done (resume finds no file) and the job stops."""
        while self.inflight and (self.inflight[0].done() or block):
            outcome = self.inflight.popleft().result()
            self.unsynced += 1
            if self.unsynced >= FSYNC_EVERY:
                self.sync()
            yield outcome
            block = every
        if every:
            self.sync()

    def sync(self) -> None:
        if self.unsynced:
            fsync_dir(self.out_dir)  # make the renames durable
            self.unsynced = 0

    def close(self) -> None:
        """Cut short: let the rows being written finish (they journal themselves)."""
        wait(list(self.inflight))
        self.inflight.clear()
        self.unsynced = 1
        self.sync()
