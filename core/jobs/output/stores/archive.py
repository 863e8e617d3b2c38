"""The archive layouts: ArchiveFormat, the contract a format module in formats/ fills (its shard's
files, writer and readers), and the Layout every such format is; what is not a format's own is
done once for all (shard_files.py, archive_store.py). Standard library only at import.
Knows shards; nothing inside them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from qtts.core.jobs.output.stores.archive_store import ArchiveStore, ShardTarget
from qtts.core.jobs.output.stores.layout import Layout, Sample, repack_temp
from qtts.core.jobs.output.stores.shard_files import (
    MEMBER_SEP,
    ArchiveShard,
    Part,
    ShardWriter,
    name_parts,
)
from qtts.core.jobs.state.atomic_files import atomic_write, unlink_quietly
from qtts.core.jobs.state.paths import ARCHIVE_DIR

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from qtts.core.jobs.output.stores.layout import Listing, StoreOptions
    from qtts.core.jobs.output.writer import WriterClock
    from qtts.core.jobs.state.journal import Journal


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
class ArchiveFormat(Layout):
    name: str  # the --output value
    help: str  # its part of --output's help (Rich markup)
    parts: tuple[Part, ...]  # the shard's files; the last is the key part
    member: Callable[[str, str], str]  # (id, audio format) -> its audio's member in the key part
    writer: Callable[[Callable[[Part], BinaryIO], int], ShardWriter]  # (open a part, sample rate)
    keys_in: Callable[[Part, Path], list[str]]  # the ids one part file holds, in order
    copy_without: Callable[[Part, Path, BinaryIO, set[str]], int]  # a part less some ids: kept
    # (shard, ids) -> (id, audio bytes, codes bytes | None) of those it holds, in shard order,
    # one sample in memory at a time
    samples: Callable[[ArchiveShard, Collection[str]], Iterator[Sample]]
    durations: Callable[[ArchiveShard], dict[str, float]]  # {id: seconds} of every sample
    open_members: Callable[[Path, KeptBlocks], MemberSource]  # (key part path, shared blocks)
    # what reading a damaged part raises besides OSError (a function: its library loads late)
    read_errors: Callable[[], tuple[type[BaseException], ...]] = tuple
    hub: HubLoad | None = None  # how `datasets.load_dataset(OUT)` reads it; None: it cannot
    # How a client reads the shards back, as Python lines with `{data}` where OUT/data goes (as
    # a string literal): what the dataset card shows (after load_dataset(OUT) where `hub` is set).
    reads_back: tuple[str, ...] = ()

    shards = True
    codes_missing = "codes missing (--save-codes packs them with each row's audio)"

    @property
    def key(self) -> Part:
        return self.parts[-1]

    def shard(self, out_dir: Path, container: str) -> ArchiveShard:
        """The shard whose key part `container` (relative to the out dir) is."""
        name = container[len(ARCHIVE_DIR) + 1 :]
        return ArchiveShard(self, out_dir / ARCHIVE_DIR, self.key.shard_of(name) or "")

    # -- Layout ---------------------------------------------------------------------------------
    def open(self, out_dir: Path, journal: Journal, spec: StoreOptions, *, writer: str,
             workers: int, clock: WriterClock | None) -> ArchiveStore:  # fmt: skip
        return ArchiveStore(out_dir, self, journal, spec, prefix=writer, encoders=workers,
                            clock=clock)  # fmt: skip

    def repack_target(self, out_dir: Path, spec: StoreOptions, writer: str) -> ShardTarget:
        return ShardTarget(out_dir, self, spec, prefix=writer)

    def holds(self, container: str) -> bool:
        folder, _, name = container.partition("/")
        return folder == ARCHIVE_DIR and self.key.shard_of(name) is not None

    def claims(self, locations: pa.Array) -> np.ndarray:
        import pyarrow.compute as pc

        from qtts.core.jobs.state.records import as_bools

        key = rf"^{ARCHIVE_DIR}/{self.key.regex()}{MEMBER_SEP}"
        return as_bools(pc.match_substring_regex(locations, key))

    def codes_held(self, ids: pa.Array, codes_saved: pa.Array, listing: Listing) -> np.ndarray:
        from qtts.core.jobs.state.records import as_bools

        return as_bools(codes_saved)  # packed with the audio when the record says so

    def owns_temp(self, final: str, prefix: str, owns_row: Callable[[str], bool]) -> bool:
        folder, _, name = final.partition("/")
        return folder == ARCHIVE_DIR and any(
            (shard := part.shard_of(name)) is not None and shard.startswith(prefix)
            for part in self.parts
        )

    def take_out(self, out_dir: Path, container: str, ids: list[str], *,
                 keep_codes: bool) -> None:  # fmt: skip
        """The shard rewritten less the rows: every part there, the key last (its own key
        too missing, after a kill between a seal's renames, leaves the others to empty)."""
        gone = set(ids)
        for part, path in self.shard(out_dir, container).paths():
            if path.exists():
                self._rewrite_part(part, path, gone)

    def _rewrite_part(self, part: Part, path: Path, gone: set[str]) -> None:
        """One part file less the rows `gone`: rewritten atomically, removed when none is left,
        untouched when it holds none of them (a rerun finishing a retraction)."""
        held = self.keys_in(part, path)
        left = sum(1 for k in held if k not in gone)
        if left == len(held):
            return
        if left == 0:
            unlink_quietly(path)
            return
        atomic_write(path, lambda file: self.copy_without(part, path, file, gone))

    def read_back(self, out_dir: Path, container: str, ids: list[str], *,
                  with_codes: bool) -> Iterator[Sample]:  # fmt: skip
        for row_id, audio, codes in self.samples(self.shard(out_dir, container), set(ids)):
            yield row_id, audio, codes if with_codes else None

    def name_temps(self, out_dir: Path, container: str) -> bool:
        return name_parts(self.shard(out_dir, container), repack_temp)

    def audio_source(self, out_dir: Path, container: str, kept: Any) -> MemberSource:
        return self.open_members(self.shard(out_dir, container).key_path, kept)
