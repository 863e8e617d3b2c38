"""What an archive format is, as the rest of the output seam sees it: the contract a format module
in stores/formats/ fills in (ArchiveFormat), the files a shard is made of (Part), and one shard's
files in a folder (ArchiveShard).

A shard is one or more part files in OUT/data/, each named `{head}{shard}{tail}` from the
shard's name (`{job shard}{run tag}-{k:06d}`: never a `.` or a `#` in it, so a file name is a
part of one shard at most, of one format). The last part is the key part: a row's location
names it (`data/{key part}#{member}`), resume and the views count a shard present when it is
listed, and it takes its name last when a shard is sealed or repacked, so it is there only once
every other part is. A part left without its key (a kill between two renames) holds rows whose
records name the missing key: they are redone, and taking them out removes that part.

Everything about the bytes inside the parts is the format's; naming, temp files, fsyncs,
renames, journals and retraction are the seam's (shard_files.py, archive.py, retract.py,
repack_*.py), so no format writes them again.
Standard library only at import: the registry reads every format while `qtts --help` draws.
Knows the contract; no format.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

SHARD_NAME_NEVER = ".#"  # characters no shard name holds


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
        record (the sample's fields come from it: sample_fields.py)."""

    def close(self) -> None:
        """End every part's data (the seam then flushes, fsyncs and names the files)."""


class MemberSource(Protocol):
    """One shard's audio members for `qtts score`; thread-safe."""

    def position(self, member: str) -> tuple[int, int]:
        """Where the member sits in the shard (members read in this order read each block
        once); (0, 0) for a member it does not hold."""

    def read(self, member: str) -> bytes:
        """The member's encoded audio."""


class KeptBlocks(Protocol):
    """A few decoded blocks shared by every shard's source (member_reader.py owns it)."""

    def get(self, key: tuple, load: Callable[[], object]) -> object: ...


@dataclass(frozen=True)
class HubLoad:
    """How Hugging Face `datasets` loads a folder of these shards as it is: what a dataset card's
    `configs` and `dataset_info` say of it (core/quality/dataset_card.py writes them)."""

    pattern: str  # the shards' data_files glob under OUT, e.g. "data/*.parquet"
    # (a shard's key part) -> the card's features; None: the loader's builder types the columns
    features: Callable[[Path], list[dict]] | None = None
    filters_ids: bool = False  # honours a card's `filters` on `id`: the keep rules apply


@dataclass(frozen=True)
class ArchiveFormat:
    name: str  # the --output value
    help: str  # its part of --output's help (Rich markup)
    parts: tuple[Part, ...]  # the shard's files; the last is the key part
    member: Callable[[str, str], str]  # (id, audio format) -> its audio's member in the key part
    writer: Callable[[Callable[[Part], BinaryIO], int], ShardWriter]  # (open a part, sample rate)
    keys_in: Callable[[Part, Path], list[str]]  # the ids one part file holds, in order
    copy_without: Callable[[Part, Path, BinaryIO, set[str]], int]  # a part less some ids: kept
    # (shard, ids) -> (id, audio bytes, codes bytes | None) of those it holds, in shard order,
    # one sample in memory at a time
    samples: Callable[[ArchiveShard, Collection[str]], Iterator[tuple[str, bytes, bytes | None]]]
    durations: Callable[[ArchiveShard], dict[str, float]]  # {id: seconds} of every sample
    member_source: Callable[[Path, KeptBlocks], MemberSource]  # (key part path, shared blocks)
    # what reading a damaged part raises besides OSError (a function: its library loads late)
    read_errors: Callable[[], tuple[type[BaseException], ...]] = tuple
    hub: HubLoad | None = None  # how `datasets.load_dataset(OUT)` reads it; None: it cannot
    # How a client reads the shards back, as Python lines with `{data}` where OUT/data goes (as
    # a string literal): what the dataset card shows (after load_dataset(OUT) where `hub` is set).
    reads_back: tuple[str, ...] = ()

    @property
    def key(self) -> Part:
        return self.parts[-1]


@dataclass(frozen=True)
class ArchiveShard:
    """One shard's files in a folder (OUT/data/)."""

    fmt: ArchiveFormat
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


def _escape(text: str) -> str:
    return "".join(f"\\{c}" if c in ".^$*+?{}[]\\|()#" else c for c in text)
