"""The archive layouts: rows appended to an open shard in OUT/data/, sealed every --shard-rows
rows, when a row comes to a shard open SHARD_MAX_AGE_S or longer (so a slow CPU job makes rows
durable too), and at the end of the run.

A shard is written under a temp name; sealing closes it, fsyncs it, journals every row in it and
renames it into place (then fsyncs the folder). So a reader sees whole shards only, every sealed
row has its record, and a kill loses at most the open shard's rows, which have no record and are
redone by the next run (its temp file removed then). Shard names are `{writer}-{k:06d}.tar` or
`.parquet`; a writer's prefix carries the job shard and a fresh run tag, so tasks of one job and
Ray actors never collide, and a sealed shard is never replaced (a retried Ray unit's writer
starts after the shards its first attempt sealed). Rows are encoded on `encoders` threads and
appended by one more, in the order they were submitted; each part is timed on the store's clock
(core/jobs/output/writer_clock.py). Knows shards and records; the formats live in shard_formats.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from qtts.core.jobs.choices import DEFAULT_SHARD_ROWS
from qtts.core.jobs.output.stores.base import RowOutput
from qtts.core.jobs.output.stores.locations import ARCHIVE_DIR, member_location
from qtts.core.jobs.output.stores.shard_formats import FORMATS
from qtts.core.jobs.output.writer import (
    encode_audio,
    encode_codes,
    fsync_dir,
    temp_path,
    tracked,
    unlink_quietly,
    write_error,
)
from qtts.core.jobs.output.writer_clock import WriterClock
from qtts.core.jobs.state.journal import Journal

SHARD_MAX_AGE_S = 600.0  # an open shard older than this is sealed when its next row comes


@dataclass
class _OpenShard:
    name: str
    tmp: Path
    file: object
    writer: object
    started: float
    records: list[dict] = field(default_factory=list)
    temp: ExitStack = field(default_factory=ExitStack)


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
        self.layout, self.fmt = layout, FORMATS[layout]
        self.dir = out_dir / ARCHIVE_DIR
        self.journal, self.audio_format, self.save_codes = journal, audio_format, save_codes
        self.prefix, self.shard_rows, self.max_age_s = prefix, shard_rows, max_age_s
        self._open: _OpenShard | None = None
        self._next = 0
        self.clock = clock or WriterClock()
        self._encoders = ThreadPoolExecutor(encoders, thread_name_prefix="qtts-encode")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qtts-archive")

    def shard_name(self, k: int) -> str:
        return f"{self.prefix}-{k:06d}{self.fmt.suffix}"

    def submit(self, row: RowOutput) -> Future[None]:
        encoded = self._encoders.submit(self._encode, row)
        return self._pool.submit(self._guarded, self._add, row, encoded)

    def _encode(self, row: RowOutput) -> tuple[bytes, bytes | None]:
        with self.clock.part("encode"):
            audio = encode_audio(row.audio, row.sample_rate, self.audio_format)
            codes = encode_codes(row.codes) if self.save_codes and row.codes is not None else None
        return audio, codes

    def _guarded(self, step, *args) -> None:
        try:
            step(*args)
        except OSError as e:
            where = self._open.tmp if self._open else self.dir
            self._discard()  # its rows have no record: the next run redoes them
            raise write_error(e, where) from e

    def _add(self, row: RowOutput, encoded: Future[tuple[bytes, bytes | None]]) -> None:
        audio, codes = encoded.result()
        shard = self._open or self._start(row.sample_rate)
        member = self.fmt.audio_member(row.id, self.audio_format)
        with self.clock.part("measures"):
            record = row.record(member_location(shard.name, member), len(audio), codes is not None)
        with self.clock.part("write"):
            shard.writer.add(row.id, audio, self.audio_format, codes, record)
        shard.records.append(record)
        full = len(shard.records) >= self.shard_rows
        if full or time.monotonic() - shard.started >= self.max_age_s:
            self._seal()

    def _start(self, sample_rate: int) -> _OpenShard:
        self.dir.mkdir(parents=True, exist_ok=True)
        while (self.dir / self.shard_name(self._next)).exists():  # a retried Ray unit's first
            self._next += 1  # attempt sealed these: a sealed shard is never replaced
        name = self.shard_name(self._next)
        self._next += 1
        tmp = temp_path(self.dir / name)
        temp = ExitStack()
        temp.enter_context(tracked(tmp))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError:
            temp.close()
            raise
        file = os.fdopen(fd, "wb")
        writer = self.fmt.open(file, sample_rate)
        self._open = _OpenShard(name, tmp, file, writer, time.monotonic(), temp=temp)
        return self._open

    def _seal(self) -> None:
        shard = self._open
        if shard is None:
            return
        with self.clock.part("write"):
            shard.writer.close()
            shard.file.flush()
            os.fsync(shard.file.fileno())
            shard.file.close()
            with self.clock.part("journal"):  # durable, not yet visible: journalled just before
                self.journal.append(shard.records)
            os.replace(shard.tmp, self.dir / shard.name)
            shard.temp.close()
            self._open = None
            fsync_dir(self.dir)

    def _discard(self) -> None:
        shard, self._open = self._open, None
        if shard is not None:
            try:
                shard.file.close()
            except OSError:
                pass
            unlink_quietly(shard.tmp)
            shard.temp.close()

    def published(self, ids: list[str], since: float) -> dict[str, float]:
        """Rows of `ids` in this writer's sealed shards (a Ray unit's writer is its own, named
        for this run, so `since` is not needed: no other run's shard has these names)."""
        wanted, done, k = set(ids), {}, 0
        while (path := self.dir / self.shard_name(k)).exists():
            done.update((i, s) for i, s in self.fmt.durations_in(path).items() if i in wanted)
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
