"""A shard's files on disk, whatever its format: its parts (`{head}{shard}{tail}`, the last the key
part), one shard's files in a folder (ArchiveShard), and its parts written under temp names, made
durable, then named, the key last (ShardFiles; docs/job-state.md, "Archive shards"). A shard name
never holds `.` or `#`, so a file is a part of one shard at most. Standard library only.
Knows part files, temp names, fsyncs and renames; nothing inside the files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from qtts.core.jobs.state.atomic_files import fsync_dir, tracked, unlink_quietly
from qtts.core.jobs.state.paths import ARCHIVE_DIR

SHARD_NAME_NEVER = ".#"  # characters no shard name holds
MEMBER_SEP = "#"  # shard names never hold it; an id may, so a member is all after the first


@dataclass(frozen=True)
class Part:
    """One file of a shard: `{head}{shard}{tail}` (tail starting with a dot)."""

    head: str
    tail: str

    def name(self, shard: str) -> str:
        return f"{self.head}{shard}{self.tail}"

    def shard_of(self, file_name: str) -> str | None:
        """The shard whose part `file_name` is, else None."""
        if not (file_name.startswith(self.head) and file_name.endswith(self.tail)):
            return None
        shard = file_name[len(self.head) : len(file_name) - len(self.tail)]
        ok = shard and not any(c in shard for c in SHARD_NAME_NEVER)
        return shard if ok else None

    def regex(self) -> str:
        """A pattern matching this part's file names (for Arrow's regex kernels)."""
        return f"{_escape(self.head)}[^{_escape(SHARD_NAME_NEVER)}/]+{_escape(self.tail)}"


class ShardWriter(Protocol):
    def add(
        self, row_id: str, audio: bytes, audio_format: str, codes: bytes | None, record: dict
    ) -> None:
        """Append one sample: its encoded audio, its .npy codes (None: not kept) and its ok
        record (the sample's fields come from it: recorder.SAMPLE_FIELDS)."""

    def close(self) -> None:
        """End every part's data (the seam then flushes, fsyncs and names the files)."""


class ShardFormat(Protocol):
    """What writing and naming a shard needs of its format (archive.ArchiveFormat fills it)."""

    parts: tuple[Part, ...]  # the shard's files; the last is the key part
    member: Callable[[str, str], str]  # (id, audio format) -> its audio's member in the key part
    writer: Callable[[Callable[[Part], BinaryIO], int], ShardWriter]  # (open a part, sample rate)
    durations: Callable[[ArchiveShard], dict[str, float]]  # {id: seconds} of every sample

    @property
    def key(self) -> Part: ...


@dataclass(frozen=True)
class ArchiveShard:
    """One shard's files in a folder (OUT/data/)."""

    fmt: ShardFormat
    folder: Path
    name: str

    def path(self, part: Part) -> Path:
        return self.folder / part.name(self.name)

    @property
    def key_path(self) -> Path:
        return self.path(self.fmt.key)

    def paths(self) -> list[tuple[Part, Path]]:
        """Every part and its path, the key last."""
        return [(part, self.path(part)) for part in self.fmt.parts]

    def location(self, member: str) -> str:
        """A row's location: its member in this shard's key part."""
        return f"{ARCHIVE_DIR}/{self.key_path.name}{MEMBER_SEP}{member}"


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
            with suppress(OSError, ValueError):
                file.close()
            unlink_quietly(tmp)
        self.files = {}
        self.release()


def name_parts(shard: ArchiveShard, temp_of: Callable[[Path], Path]) -> bool:
    """Each part's temp, if still there, takes the part's name, the key last (a rerun after a
    kill finishes what was begun); whether the shard's key part is named now."""
    for _, path in shard.paths():
        with suppress(FileNotFoundError):
            _rename(temp_of(path), path)
    return shard.key_path.exists()


def _rename(tmp: Path, final: Path) -> None:
    os.replace(tmp, final)


def _escape(text: str) -> str:
    return "".join(f"\\{c}" if c in ".^$*+?{}[]\\|()#" else c for c in text)
