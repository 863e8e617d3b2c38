"""Filling shards, whatever their format: the run's store (ArchiveStore) and a repack's batches
(ShardTarget); when a shard is sealed and what a kill loses: docs/job-state.md, "Archive shards".
Rows are encoded on `encoders` threads and appended by one more, in the order they were submitted.
Standard library only at import. Knows shards and records; the bytes are the format's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qtts.core.jobs.output.stores.layout import RepackTarget, RowOutput, StoreOptions, repack_temp
from qtts.core.jobs.output.stores.shard_files import (
    ArchiveShard,
    ShardFiles,
    ShardFormat,
    ShardWriter,
)
from qtts.core.jobs.output.writer import WriterClock
from qtts.core.jobs.state.atomic_files import fsync_dir, temp_path
from qtts.core.jobs.state.paths import ARCHIVE_DIR

if TYPE_CHECKING:
    from qtts.core.jobs.state.journal import Journal

SHARD_MAX_AGE_S = 600.0  # an open shard older than this is sealed when its next row comes


@dataclass
class _OpenShard:
    files: ShardFiles
    writer: ShardWriter
    started: float
    records: list[dict] = field(default_factory=list)


class ArchiveStore:
    def __init__(self, out_dir: Path, fmt: ShardFormat, journal: Journal, spec: StoreOptions, *,
                 prefix: str, max_age_s: float = SHARD_MAX_AGE_S, encoders: int = 1,
                 clock: WriterClock | None = None) -> None:  # fmt: skip
        self.fmt, self.dir = fmt, out_dir / ARCHIVE_DIR
        self.journal, self.audio_format = journal, spec.audio_format
        self.save_codes = spec.save_codes
        self.prefix, self.shard_rows, self.max_age_s = prefix, spec.shard_rows, max_age_s
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
        from qtts.core.jobs.output.writer import encode_audio, encode_codes

        with self.clock.part("finish"):
            row = row.finished()
        with self.clock.part("encode"):
            audio = encode_audio(row.audio, row.sample_rate, self.audio_format)
            codes = encode_codes(row.codes) if self.save_codes and row.codes is not None else None
        return row, audio, codes

    def _guarded(self, step: Callable[..., None], *args: object) -> None:
        from qtts.core.jobs.output.writer import write_error

        try:
            step(*args)
        except OSError as e:
            where = self._open.files.shard.key_path if self._open else self.dir
            self._discard()  # its rows have no record: the next run redoes them
            raise write_error(e, where) from e

    def _add(self, encoded: Future[tuple[RowOutput, bytes, bytes | None]]) -> None:
        row, audio, codes = encoded.result()  # the row as finished
        shard = self._open or self._start(row.sample_rate)
        with self.clock.part("measures"):
            location = shard.files.shard.location(self.fmt.member(row.id, self.audio_format))
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
        (retract.py), and a row failing now has none in the open shard."""

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


class ShardTarget(RepackTarget):
    """A repack into an archive layout: one shard of up to --shard-rows rows a batch, named
    `{writer}-repack-{k:06d}` (the run's own tag: never a name another run or writer has)."""

    def __init__(self, out_dir: Path, fmt: ShardFormat, spec: StoreOptions, *, prefix: str):
        super().__init__(out_dir, spec)
        self.fmt, self.dir = fmt, out_dir / ARCHIVE_DIR
        self.prefix, self.shard_rows = prefix, spec.shard_rows
        self._k, self._files, self._writer = 0, None, None

    def add(self, record: dict, audio: bytes, codes: bytes | None, old_file: str) -> None:
        if self._writer is None:
            self._start(record["sample_rate"])
        location = self._files.shard.location(self.fmt.member(record["id"], self.audio_format))
        new = self.row(record, location, len(audio), old_file)
        self._writer.add(record["id"], audio, self.audio_format, codes, new)

    def due(self) -> bool:
        return len(self.rows) >= self.shard_rows

    def _start(self, sample_rate: int) -> None:
        shard = ArchiveShard(self.fmt, self.dir, f"{self.prefix}-repack-{self._k:06d}")
        self._k += 1
        self._files = ShardFiles(shard, repack_temp, exclusive=False)
        self._writer = self.fmt.writer(self._files.open, sample_rate)

    def seal(self) -> list[dict]:
        if self._writer is None:
            return []
        self._writer.close()
        self._files.close()
        self._files.release()  # durable: left for the intent to name
        self._files = self._writer = None
        fsync_dir(self.dir)
        return self.sealed()

    def close_open(self) -> None:
        with suppress(OSError, ValueError):
            if self._writer is not None:
                self._writer.close()  # the writer first: it ends into the files
        if self._files is not None:
            self._files.discard()
        self._files = self._writer = None
