"""Which store a run writes through, and how its archive writers are named.

A writer's shard names start with its prefix: the job shard (`shard-I-of-N-`, none when
unsharded) and a tag fresh for each run, so tasks of one job, reruns and Ray actors writing into
the same OUT/data/ never collide. A Ray work unit gets a prefix of its own from its rows, so a
unit Ray retries finds the shard its first attempt sealed. How many writer threads a local run
gets is decided here too (writer_threads).
Knows layouts (the registry's), names and thread counts; the stores do the writing.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from qtts.core.jobs.output.stores.archive import DEFAULT_SHARD_ROWS, ArchiveStore
from qtts.core.jobs.output.stores.base import OutputStore
from qtts.core.jobs.output.stores.files import FilesStore
from qtts.core.jobs.output.stores.locations import FILES
from qtts.core.jobs.output.stores.registry import check_layout, part_of
from qtts.core.jobs.output.writer_clock import WriterClock
from qtts.core.jobs.state.journal import Journal

# Writer threads: half the cores this process may run on, at least 2, at most 8. The other half
# is the synthesis side's: on a GPU its decode loop and its vocoder thread each keep a core busy
# (and the tokenizer and the loader have threads of their own); on a CPU the engine takes every
# core while the writers idle (a thread pool starts threads only as work arrives). Past 8,
# threads gain little: each row's Python glue (records, JSON lines) holds the GIL.
MIN_WRITERS, MAX_WRITERS = 2, 8


def usable_cpus() -> int:
    """The cores this process may run on (its affinity, as taskset or a container's cpuset set
    it), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def writer_threads(cpus: int | None = None) -> int:
    """Writer threads for a run on `cpus` cores (None: this process's)."""
    cpus = usable_cpus() if cpus is None else cpus
    return max(MIN_WRITERS, min(MAX_WRITERS, cpus // 2))


@dataclass(frozen=True)
class StoreSpec:
    layout: str = FILES  # files, or an archive format's name (registry.py)
    audio_format: str = "wav"
    save_codes: bool = False
    shard_rows: int = DEFAULT_SHARD_ROWS
    prefix: str = ""  # the job shard's part of archive shard names ("" when unsharded)
    run_tag: str = "run"  # this run's part

    def __post_init__(self) -> None:
        check_layout(self.layout)  # an unknown name: a UsageError naming --output's choices

    def open(
        self,
        out_dir: Path,
        journal: Journal,
        *,
        workers: int = MIN_WRITERS,
        clock: WriterClock | None = None,
    ) -> OutputStore:
        """workers: threads that encode and write (an archive appends to its shard on one more,
        in the order rows come); clock: where they report their busy time."""
        if self.layout == FILES:
            return FilesStore(
                out_dir, journal, self.audio_format, self.save_codes, workers, clock=clock
            )
        name = f"{self.prefix}{self.run_tag}"
        return self._archive(out_dir, journal, name, workers=workers, clock=clock)

    def open_unit(self, out_dir: Path, journal: Journal, ids: list[str]) -> OutputStore:
        """A Ray unit's store: a unit is one shard at most (units are capped at shard_rows),
        named from its rows."""
        if self.layout == FILES:
            return FilesStore(out_dir, journal, self.audio_format, self.save_codes, workers=1)
        digest = hashlib.blake2b("\n".join(ids).encode(), digest_size=6).hexdigest()
        return self._archive(out_dir, journal, f"{self.prefix}{self.run_tag}-u{digest}")

    def _archive(
        self,
        out_dir: Path,
        journal: Journal,
        prefix: str,
        workers: int = 1,
        clock: WriterClock | None = None,
    ) -> ArchiveStore:
        return ArchiveStore(
            out_dir,
            self.layout,
            journal,
            audio_format=self.audio_format,
            save_codes=self.save_codes,
            prefix=prefix,
            shard_rows=self.shard_rows,
            encoders=workers,
            clock=clock,
        )

    def owns_shard(self, name: str) -> bool:
        """Whether a file in OUT/data/ (or a temp file's final name there) is a part of a shard
        written for this job shard; a file of no format is no shard's."""
        found = part_of(name)
        return found is not None and found.shard.startswith(self.prefix)


def writer_prefix(shard_suffix: str) -> str:
    """`-shard-1-of-4` -> `shard-1-of-4-`; unsharded -> ``."""
    return f"{shard_suffix.lstrip('-')}-" if shard_suffix else ""
