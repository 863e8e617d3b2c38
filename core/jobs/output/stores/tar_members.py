"""Tar files as the tar-based formats use them: members with no wall clock (the same rows make the
same bytes), a copy less some samples, the samples a tar holds (a member's key from its name:
`key_of`), a member read back by its byte range. Standard library only; no format's names.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

MTIME = 0  # members carry no wall clock


def open_writer(file: BinaryIO) -> tarfile.TarFile:
    """A tar appending to an open file (a shard part's temp file)."""
    return tarfile.open(fileobj=file, mode="w", format=tarfile.PAX_FORMAT)


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), MTIME, 0o644
    tar.addfile(info, io.BytesIO(data))


def keys(path: Path, key_of: Callable[[str], str]) -> list[str]:
    """The keys of a tar's samples, in order."""
    with tarfile.open(path, mode="r") as tar:
        return list(dict.fromkeys(key_of(info.name) for info in tar))


def copy_without(
    path: Path, file: BinaryIO, drop: Iterable[str], key_of: Callable[[str], str]
) -> int:
    """The tar's members into `file`, less the samples whose key is in `drop`; samples kept."""
    drop = set(drop)
    kept: set[str] = set()
    with tarfile.open(path, mode="r") as src, open_writer(file) as dst:
        for info in src:
            key = key_of(info.name)
            if key in drop:
                continue
            kept.add(key)
            dst.addfile(info, src.extractfile(info))
    return len(kept)


def samples(
    path: Path, key_of: Callable[[str], str], wanted: Collection[str] | None = None
) -> Iterator[tuple[str, dict[str, bytes]]]:
    """(key, {member name: bytes}) of each sample in order whose key is in `wanted` (None:
    every sample), one sample in memory at a time; other samples' members are not read."""
    current, members = None, {}
    with tarfile.open(path, mode="r") as tar:
        for info in tar:
            key = key_of(info.name)
            if key != current and members:
                yield current, members
                members = {}
            current = key
            if wanted is None or key in wanted:
                members[info.name] = tar.extractfile(info).read() if info.size else b""
    if members:
        yield current, members


class TarMembers:
    """A tar's members by name, read back by their byte range (MemberSource)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with tarfile.open(path, mode="r") as tar:
            self.index = {i.name: (i.offset_data, i.size) for i in tar}

    def position(self, member: str) -> tuple[int, int]:
        return (self.index.get(member, (0, 0))[0], 0)

    def read(self, member: str) -> bytes:
        start, size = self.index[member]
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(size)
