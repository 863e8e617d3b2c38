"""Where repacked rows are written before they are committed: the new outputs of one batch, whole
and fsynced under their repack temp names (repack_commit.repack_temp), each row's new record
(its location, size and whether its codes are kept) and the intent row that commits it.

An archive layout's batch is one shard, `{job shard}{run tag}-repack-{k:06d}` (the run's own tag:
never a name another run or writer has), written by the layout's format from the registry
(its part files by shard_files), so a format added there is repacked into with no change here.
The files layout's batch is a file per row (`{id}.wav|flac`, and `{id}.codes.npy` when the codes
come out of a shard). While a batch is open its temps are live (an immediate exit removes them);
sealed, they are left for the intent to name.
Knows output names and formats; no journals, no records beyond building them.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from qtts.core.jobs.output.stores.files import audio_name, codes_name
from qtts.core.jobs.output.stores.locations import ARCHIVE_DIR, FILES, member_location
from qtts.core.jobs.output.stores.registry import archive_format
from qtts.core.jobs.output.stores.repack_commit import OLD_FILE, repack_temp
from qtts.core.jobs.output.stores.shard_files import ShardFiles
from qtts.core.jobs.output.stores.shard_format import ArchiveShard
from qtts.core.jobs.state.atomic_files import fsync_dir, tracked, unlink_quietly

if TYPE_CHECKING:
    from qtts.core.jobs.output.stores.open_store import StoreSpec

FILES_BATCH = 1000  # plain files committed at once


class _Target:
    def __init__(self, out_dir: Path, audio_format: str, save_codes: bool) -> None:
        self.out, self.audio_format, self.save_codes = out_dir, audio_format, save_codes
        self.rows: list[dict] = []  # intent rows of the open batch
        self._temps = ExitStack()
        self._paths: list[Path] = []

    def _track(self, path: Path) -> None:
        self._temps.enter_context(tracked(path))
        self._paths.append(path)

    def _row(self, record: dict, location: str, nbytes: int, old_file: str) -> dict:
        new = {**record, "file": location, "bytes": nbytes, "codes_saved": self.save_codes}
        self.rows.append({**new, OLD_FILE: old_file})
        return new

    def _sealed(self) -> list[dict]:
        rows, self.rows, self._paths = self.rows, [], []
        self._temps.close()  # durable now: an immediate exit leaves them for the intent
        self._temps = ExitStack()
        return rows

    def discard(self) -> None:
        """Drop the open batch (its rows stay where they were)."""
        self._close()
        for path in self._paths:
            unlink_quietly(path)
        self.rows, self._paths = [], []
        self._temps.close()
        self._temps = ExitStack()

    def _close(self) -> None:
        pass


class ShardTarget(_Target):
    """An archive layout: one shard of up to `shard_rows` rows at a time."""

    def __init__(self, out_dir: Path, layout: str, audio_format: str, save_codes: bool, *,
                 prefix: str, shard_rows: int) -> None:  # fmt: skip
        super().__init__(out_dir, audio_format, save_codes)
        self.fmt, self.dir = archive_format(layout), out_dir / ARCHIVE_DIR
        self.prefix, self.shard_rows = prefix, shard_rows
        self._k, self._files, self._writer = 0, None, None

    def add(self, record: dict, audio: bytes, codes: bytes | None, old_file: str) -> None:
        if self._writer is None:
            self._start(record["sample_rate"])
        member = self.fmt.member(record["id"], self.audio_format)
        location = member_location(self._files.shard.key_path.name, member)
        new = self._row(record, location, len(audio), old_file)
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
        return self._sealed()

    def _close(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()  # the writer first: it ends into the files
        except (OSError, ValueError):
            pass
        if self._files is not None:
            self._files.discard()
        self._files = self._writer = None


class FilesTarget(_Target):
    """The files layout: a file per row, committed a batch of rows at a time."""

    def add(self, record: dict, audio: bytes, codes: bytes | None, old_file: str) -> None:
        name = audio_name(record["id"], self.audio_format)
        if codes is not None:  # out of a shard (a plain file's codes keep their name)
            _write(self, self.out / codes_name(record["id"]), codes)
        _write(self, self.out / name, audio)
        self._row(record, name, len(audio), old_file)

    def due(self) -> bool:
        return len(self.rows) >= FILES_BATCH

    def seal(self) -> list[dict]:
        if self.rows:
            fsync_dir(self.out)
        return self._sealed()


def _write(target: _Target, final: Path, data: bytes) -> None:
    tmp = repack_temp(final)
    target._track(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def open_target(out_dir: Path, spec: StoreSpec, prefix: str) -> ShardTarget | FilesTarget:
    """spec: open_store.StoreSpec (the run's layout, format, codes and shard size)."""
    if spec.layout == FILES:
        return FilesTarget(out_dir, spec.audio_format, spec.save_codes)
    return ShardTarget(out_dir, spec.layout, spec.audio_format, spec.save_codes,
                       prefix=prefix, shard_rows=spec.shard_rows)  # fmt: skip
