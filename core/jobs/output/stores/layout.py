"""The output seam's contract (docs/architecture.md, "The output seam"): what the job hands a store
for each finished row (RowOutput), what a store promises (OutputStore: a row's record journalled
once its audio is durable, never before nor without it), and what every --output layout answers
(Layout). Standard library only at import (`qtts --help` reads every layout).
Knows the contract; no layout.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from qtts.core.jobs.state.atomic_files import TEMP_MARK, tracked, unlink_quietly

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from qtts.core.jobs.output.writer import WriterClock
    from qtts.core.jobs.state.journal import Journal

REPACK_TEMP = f"{TEMP_MARK}repack"  # one repack per job shard at a time: a fixed name is its own
OLD_FILE = "old_file"  # a repack intent's column: where the row's audio was


@dataclass(frozen=True)
class RowOutput:
    id: str
    audio: np.ndarray  # float32 [samples]
    sample_rate: int
    codes: np.ndarray | None  # int [frames, 16]; None unless --save-codes
    # (location, audio bytes, codes saved) -> the row's ok record; called on the writer thread
    # once the store knows where the row lands, so measures never hold up synthesis
    record: Callable[[str, int, bool], dict]
    # The row as it is written, its clip finished (trimmed, resampled, normalized:
    # qtts.core.jobs.output.finishing); called on the writer thread before the clip is encoded.
    # None: the audio is written as it is.
    finish: Callable[[], RowOutput] | None = None

    def finished(self) -> RowOutput:
        return self if self.finish is None else self.finish()


class OutputStore(Protocol):
    def submit(self, row: RowOutput) -> Future[None]:
        """Publish the row; the future settles when the store has taken it (the files layout:
        published and journalled; an archive: in its open shard, journalled when it is sealed)."""
        ...

    def published(self, ids: list[str], since: float) -> dict[str, float]:
        """Of `ids`, those this store already published at or after `since` (wall clock):
        {id: seconds of audio}. A retried Ray unit skips them."""
        ...

    def remove_earlier_output(self, row_id: str) -> None:
        """The row fails in this run: what an earlier run published for it goes
        (Layout.remove_row)."""
        ...

    def close(self, *, wait: bool = True) -> None:
        """wait: finish what was submitted and make it durable (an archive seals its open
        shard); else drop what is not durable yet."""
        ...


# A row read back for a repack: (id, encoded audio, .npy codes or None)
Sample = tuple[str, bytes, "bytes | None"]


class StoreOptions(Protocol):
    """What a layout reads of the run's choice of store (open_store.StoreSpec)."""

    audio_format: str  # wav | flac
    save_codes: bool
    shard_rows: int  # rows per shard, where the layout shards


@dataclass
class Listing:
    """One pass over the out dir's outputs (presence.list_out_dir)."""

    files: pa.Table  # name (string), size (int64; null unless asked for): dot files left out
    temps: list[str] = field(default_factory=list)  # ".{final}.qtts-tmp-*" left by writers
    archive_temps: list[str] = field(default_factory=list)  # the same, in OUT/data/

    def names(self) -> pa.Array:
        return self.files["name"].combine_chunks()


class Layout:
    """One --output choice. Its methods are the questions the job asks of the outputs; a
    container is a location's file relative to the out dir (a row's file, a shard's key part),
    locations and ids are Arrow columns, and a mask is a numpy bool per row."""

    name: str  # the --output value
    help: str  # its part of --output's help (Rich markup)
    default = False  # --output on a new out dir when none is given (one layout is)
    shards = False  # rows go into shards of --shard-rows rows (a Ray unit fills one at most)
    # A redone row's output is replaced where it is, so only other layouts' copies are taken out
    # before it is made again (and a failing row's is removed: remove_row).
    replaces_by_name = False
    codes_stay = False  # a row moved within this layout keeps its codes where they are
    codes_missing = "codes missing"  # resume's reason for a row whose codes are not there

    # -- writing ------------------------------------------------------------------------------
    def open(self, out_dir: Path, journal: Journal, spec: StoreOptions, *, writer: str,
             workers: int, clock: WriterClock | None) -> OutputStore:  # fmt: skip
        """The run's store. writer: this writer's own name (job shard, run tag, Ray unit);
        workers: threads that encode and write; clock: where they report their busy time."""
        raise NotImplementedError

    def repack_target(self, out_dir: Path, spec: StoreOptions, writer: str) -> RepackTarget:
        """Where a repack writes rows moved into this layout, a batch at a time."""
        raise NotImplementedError

    def unlist(self, out_dir: Path) -> None:
        """What lists this layout's rows by name (files: metadata.jsonl) goes, durably, before
        any of them is replaced or taken out; the run's end rebuilds it."""

    def remove_row(self, out_dir: Path, row_id: str) -> None:
        """The row fails in this run: what an earlier run published for it by name goes, so no
        output outlives its row's failed record."""

    # -- where its rows are ---------------------------------------------------------------------
    def holds(self, container: str) -> bool:
        """Whether the container is one of this layout's (at most one layout's)."""
        raise NotImplementedError

    def claims(self, locations: pa.Array) -> np.ndarray:
        """Per location: this layout made it."""
        raise NotImplementedError

    def as_written(self, ids: pa.Array, locations: pa.Array, audio_format: str) -> np.ndarray:
        """Per row: its location is where this run would write it."""
        return self.claims(locations)

    def codes_held(self, ids: pa.Array, codes_saved: pa.Array, listing: Listing) -> np.ndarray:
        """Per row (taken as this layout's): its --save-codes codes are there."""
        raise NotImplementedError

    def owns_temp(self, final: str, prefix: str, owns_row: Callable[[str], bool]) -> bool:
        """Whether a temp file's final name (relative to the out dir) is a write of this job
        shard's (prefix: its writers' names start so; owns_row: it owns that row id)."""
        return False

    # -- rows taken out, read back, moved -------------------------------------------------------
    def take_out(self, out_dir: Path, container: str, ids: list[str], *,
                 keep_codes: bool) -> None:  # fmt: skip
        """The container less the rows `ids` (keep_codes: codes kept by name stay), after
        unlist; the caller fsyncs the folders."""
        raise NotImplementedError

    def read_back(self, out_dir: Path, container: str, ids: list[str], *,
                  with_codes: bool) -> Iterator[Sample]:  # fmt: skip
        """The rows `ids` the container holds, in its own order, one in memory at a time."""
        raise NotImplementedError

    def read_errors(self) -> tuple[type[BaseException], ...]:
        """What reading a damaged container raises besides OSError."""
        return ()

    def name_temps(self, out_dir: Path, container: str) -> bool:
        """A repacked container's temps (repack_temp) take their names, if still there (a kill
        may have come between); whether the container is named now."""
        raise NotImplementedError

    def audio_source(self, out_dir: Path, container: str, kept: Any) -> Any:
        """What `qtts score` reads the container's audio from: a MemberSource (archive.py), or
        None where the container is the audio file; kept: the blocks every source shares."""
        raise NotImplementedError


def repack_temp(final: Path) -> Path:
    """Where a repacked output is written before it takes its name: found again after a kill
    (the run's cleanup removes it as any other temp file when no intent names it)."""
    return final.parent / f".{final.name}{REPACK_TEMP}"


class RepackTarget:
    """A batch of repacked rows being written under repack temps (repack_commit.py commits it):
    each row's new record with `old_file`, where its audio was. While the batch is open its
    temps are live (an immediate exit removes them); sealed, they are left for the intent."""

    def __init__(self, out_dir: Path, spec: StoreOptions) -> None:
        self.out, self.audio_format, self.save_codes = out_dir, spec.audio_format, spec.save_codes
        self.rows: list[dict] = []  # intent rows of the open batch
        self._temps = ExitStack()
        self._paths: list[Path] = []

    def add(self, record: dict, audio: bytes, codes: bytes | None, old_file: str) -> None:
        raise NotImplementedError

    def due(self) -> bool:
        """The batch is full: commit it."""
        raise NotImplementedError

    def seal(self) -> list[dict]:
        """The batch made durable, its temps left for the intent; its intent rows."""
        raise NotImplementedError

    def row(self, record: dict, location: str, nbytes: int, old_file: str) -> dict:
        """The row's new record (its intent row kept): where it lands now, its size, its codes."""
        new = {**record, "file": location, "bytes": nbytes, "codes_saved": self.save_codes}
        self.rows.append({**new, OLD_FILE: old_file})
        return new

    def write(self, final: Path, data: bytes) -> None:
        """One whole file under its repack temp, fsynced."""
        tmp = repack_temp(final)
        self.track(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def track(self, path: Path) -> None:
        self._temps.enter_context(tracked(path))
        self._paths.append(path)

    def sealed(self) -> list[dict]:
        rows, self.rows, self._paths = self.rows, [], []
        self._temps.close()  # durable now: an immediate exit leaves them for the intent
        self._temps = ExitStack()
        return rows

    def discard(self) -> None:
        """Drop the open batch (its rows stay where they were)."""
        self.close_open()
        for path in self._paths:
            unlink_quietly(path)
        self.rows, self._paths = [], []
        self._temps.close()
        self._temps = ExitStack()

    def close_open(self) -> None:
        """Close what writes the open batch, its data dropped."""
