"""The archive layouts: rows appended to an open shard in OUT/data/, sealed every --shard-rows
rows, when a row comes to a shard open SHARD_MAX_AGE_S or longer (so a slow CPU job makes rows
durable too), and at the end of the run.

A shard is written under a temp name; sealing closes it, fsyncs it, journals every row in it and
renames it into place (then fsyncs the folder). So a reader sees whole shards only, every sealed
row has its record, and a kill loses at most the open shard's rows, which have no record and are
redone by the next run (its temp files removed then). Shard names are `{writer}-{k:06d}`, each
of the shard's files named from it by its format (shard_format.Part; its key part named last);
a writer's prefix carries the job shard and a fresh run tag, so tasks of one job and Ray actors
never collide, and a sealed shard is never replaced (a retried Ray unit's writer starts after
the shards its first attempt sealed). Rows are encoded on `encoders` threads and appended by one
more, in the order they were submitted; each part is timed on the store's clock
(core/jobs/output/writer_clock.py). Knows shards and records; the formats are the registry's,
their files shard_files'.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from qtts.core.jobs.contract.choices import DEFAULT_SHARD_ROWS
from qtts.core.jobs.output.stores.base import RowOutput
from qtts.core.jobs.output.stores.locations import ARCHIVE_DIR, member_location
from qtts.core.jobs.output.stores.registry import archive_format
from qtts.core.jobs.output.stores.shard_files import ShardFiles
from qtts.core.jobs.output.stores.shard_format import ArchiveShard, ShardWriter
from qtts.core.jobs.output.writer import encode_audio, encode_codes, write_error
from qtts.core.jobs.output.writer_clock import WriterClock
from qtts.core.jobs.state.atomic_files import temp_path
from qtts.core.jobs.state.journal import Journal

SHARD_MAX_AGE_S = 600.0  # an open shard older than this is sealed when its next row comes


@dataclass
class _OpenShard:
    files: ShardFiles
    writer: ShardWriter
    started: float
    records: list[dict] = field(default_factory=list)

    @property
    def key_name(self) -> str:
        return self.files.shard.key_path.name


class ArchiveStore:
    def __init__(
        self,
        out_dir: Path,
        layout: str,
        journal: Journal,
        *,
        audio_format: str,
        save_codes: bool,
        prefix: str,
        shard_rows: int = DEFAULT_SHARD_ROWS,
        max_age_s: float = SHARD_MAX_AGE_S,
        encoders: int = 1,
        clock: WriterClock | None = None,
    ) -> None:
        self.layout, self.fmt = layout, archive_format(layout)
        self.dir = out_dir / ARCHIVE_DIR
        self.journal, self.audio_format, self.save_codes = journal, audio_format, save_codes
        self.prefix, self.shard_rows, self.max_age_s = prefix, shard_rows, max_age_s
        self._open: _OpenShard | None = None
        self._next = 0
        self.clock = clock or WriterClock()
        self._encoders = ThreadPoolExecutor(encoders, thread_name_prefix="qtts-encode")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qtts-archive")

    def shard(self, k: int) -> ArchiveShard:
        return ArchiveShard(self.fmt, self.dir, f"{self.prefix}-{k:06d}")

    def submit(self, row: RowOutput) -> Future[None]:
        encoded = self._encoders.submit(self._encode, row)
        return self._pool.submit(self._guarded, self._add, encoded)

    def _encode(self, row: RowOutput) -> tuple[RowOutput, bytes, bytes | None]:
        with self.clock.part("finish"):
            row = row.finished()
        with self.clock.part("encode"):
            audio = encode_audio(row.audio, row.sample_rate, self.audio_format)
            codes = encode_codes(row.codes) if self.save_codes and row.codes is not None else None
        return row, audio, codes

    def _guarded(self, step: Callable[..., None], *args: object) -> None:
        try:
            step(*args)
        except OSError as e:
            where = self._open.files.shard.key_path if self._open else self.dir
            self._discard()  # its rows have no record: the next run redoes them
            raise write_error(e, where) from e

    def _add(self, encoded: Future[tuple[RowOutput, bytes, bytes | None]]) -> None:
        row, audio, codes = encoded.result()  # the row as finished
        shard = self._open or self._start(row.sample_rate)
        member = self.fmt.member(row.id, self.audio_format)
        with self.clock.part("measures"):
            location = member_location(shard.key_name, member)
            record = row.record(location, len(audio), codes is not None)
        with self.clock.part("write"):
            shard.writer.add(row.id, audio, self.audio_format, codes, record)
        shard.records.append(record)
        full = len(shard.records) >= self.shard_rows
        if full or time.monotonic() - shard.started >= self.max_age_s:
            self._seal()

    def _start(self, sample_rate: int) -> _OpenShard:
        while self.shard(self._next).key_path.exists():  # a retried Ray unit's first attempt
            self._next += 1  # sealed these: a sealed shard is never replaced
        files = ShardFiles(self.shard(self._next), temp_path, exclusive=True)
        self._next += 1
        try:
            writer = self.fmt.writer(files.open, sample_rate)
        except BaseException:
            files.discard()
            raise
        self._open = _OpenShard(files, writer, time.monotonic())
        return self._open

    def _seal(self) -> None:
        shard = self._open
        if shard is None:
            return
        with self.clock.part("write"):
            shard.writer.close()
            shard.files.close()
            with self.clock.part("journal"):  # durable, not yet visible: journalled just before
                self.journal.append(shard.records)
            shard.files.publish()  # the key part last
            self._open = None

    def _discard(self) -> None:
        shard, self._open = self._open, None
        if shard is not None:
            shard.files.discard()

    def remove_earlier_output(self, row_id: str) -> None:
        """Nothing to do: a redone row's members left their sealed shards before the run
        (stores/retract.py), and a row failing now has none in the open shard."""

    def published(self, ids: list[str], since: float) -> dict[str, float]:
        """Rows of `ids` in this writer's sealed shards (a Ray unit's writer is its own, named
        for this run, so `since` is not needed: no other run's shard has these names)."""
        wanted, done, k = set(ids), {}, 0
        while (shard := self.shard(k)).key_path.exists():
            done.update((i, s) for i, s in self.fmt.durations(shard).items() if i in wanted)
            k += 1
        return done

    def close(self, *, wait: bool = True) -> None:
        if wait:
            try:
                self._pool.submit(self._guarded, self._seal).result()
            finally:
                self._pool.shutdown(wait=True)
                self._encoders.shutdown(wait=True)
        else:  # rows not yet added are dropped, then the open shard with them
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._encoders.shutdown(wait=True, cancel_futures=True)
            self._discard()
