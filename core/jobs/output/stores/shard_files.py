"""A shard's files on disk, whatever its format: its parts written under temp names (ShardFiles),
made durable, then named, the key part last (shard_format.py says why); the shard a location's
container names (shard_at); a batch's parts named again after a kill (name_parts).

A live writer's temps are `.{part}.qtts-tmp-{pid}-{n}`, removed by an immediate exit and by the
writer's job shard's next run; a repack's are its fixed `.{part}.qtts-tmp-repack`, left for its
intent once durable (repack_commit.py). Either way the temps of one shard are named from its
parts' names, so the run that owns a shard (open_store.StoreSpec.owns_shard) finds them all.
Knows part files, temp names, fsyncs and renames; nothing inside the files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

from qtts.core.errors import FatalError
from qtts.core.jobs.output.stores.locations import ARCHIVE_DIR
from qtts.core.jobs.output.stores.registry import part_of
from qtts.core.jobs.output.stores.shard_format import ArchiveShard, Part
from qtts.core.jobs.state.atomic_files import fsync_dir, tracked, unlink_quietly


class ShardFiles:
    """The part files of one shard being written, each opened on first use under its temp name.
    temp_of: a part's final path -> its temp path; exclusive: the temp must be new (a live
    writer's unique name) rather than truncated (a repack's fixed one)."""

    def __init__(self, shard: ArchiveShard, temp_of: Callable[[Path], Path], *, exclusive: bool):
        self.shard, self.temp_of, self.exclusive = shard, temp_of, exclusive
        self.files: dict[Part, tuple[Path, BinaryIO]] = {}
        self._live = ExitStack()  # while the temps are live, an immediate exit removes them

    def open(self, part: Part) -> BinaryIO:
        """The part's temp file, opened for writing (once)."""
        if part in self.files:
            return self.files[part][1]
        self.shard.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.temp_of(self.shard.path(part))
        self._live.enter_context(tracked(tmp))
        mode = os.O_EXCL if self.exclusive else os.O_TRUNC
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | mode, 0o666)  # umask applies
        self.files[part] = (tmp, os.fdopen(fd, "wb"))
        return self.files[part][1]

    def temps(self) -> list[Path]:
        return [tmp for tmp, _ in self.files.values()]

    def close(self) -> None:
        """Every part's data is written (the format's writer closed): flush, fsync, close."""
        for _, file in self.files.values():
            file.flush()
            os.fsync(file.fileno())
            file.close()

    def publish(self) -> None:
        """Every part takes its name, the key last; then the folder is fsynced."""
        for part, path in self.shard.paths():
            if part in self.files:
                _rename(self.files[part][0], path)
        self.release()
        fsync_dir(self.shard.folder)

    def release(self) -> None:
        """The temps are no longer live: an immediate exit leaves them (named, or durable under
        a name an intent will give them)."""
        self._live.close()
        self._live = ExitStack()

    def discard(self) -> None:
        """Drop the shard: its files closed and its temps removed."""
        for tmp, file in self.files.values():
            try:
                file.close()
            except (OSError, ValueError):
                pass
            unlink_quietly(tmp)
        self.files = {}
        self.release()


def _rename(tmp: Path, final: Path) -> None:
    os.replace(tmp, final)


def shard_at(out_dir: Path, container: str) -> ArchiveShard | None:
    """The shard whose key part a location's container names (relative to the out dir), or
    None for a plain file. A container in OUT/data/ that is no format's key part is an error:
    it is never read, rewritten or removed as some other format."""
    if not container.startswith(f"{ARCHIVE_DIR}/"):
        return None
    name = container[len(ARCHIVE_DIR) + 1 :]
    found = part_of(name)
    if found is None or not found.is_key:
        raise FatalError(f"{out_dir / container}: no output format writes a shard of that name")
    return ArchiveShard(found.fmt, out_dir / ARCHIVE_DIR, found.shard)


def name_parts(shard: ArchiveShard, temp_of: Callable[[Path], Path]) -> bool:
    """Each part's temp, if still there, takes the part's name, the key last (a rerun after a
    kill finishes what was begun); whether the shard's key part is named now."""
    for _, path in shard.paths():
        try:
            _rename(temp_of(path), path)
        except FileNotFoundError:
            pass
    return shard.key_path.exists()
