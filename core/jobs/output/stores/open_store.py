"""Which store a run writes through (StoreSpec), how its writers are named (the job shard, a run
tag, a Ray unit's digest of its rows: never a collision), how many writer threads a local run gets,
and the temps a killed run of its job shard left. Knows names and thread counts; the layouts write.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qtts.core.jobs.contract.choices import DEFAULT_SHARD_ROWS
from qtts.core.jobs.output.stores.layout import Layout, OutputStore
from qtts.core.jobs.output.stores.registry import default_layout, find, formats
from qtts.core.jobs.output.writer import WriterClock
from qtts.core.jobs.state.atomic_files import cleanup_temp_files
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.state.paths import ARCHIVE_DIR

if TYPE_CHECKING:
    from qtts.core.jobs.output.stores.presence import Listing

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
    layout: str = ""  # --output: a layout's name (registry.py); "": the default layout's
    audio_format: str = "wav"
    save_codes: bool = False
    shard_rows: int = DEFAULT_SHARD_ROWS
    prefix: str = ""  # the job shard's part of writer names ("" when unsharded)
    run_tag: str = "run"  # this run's part

    def __post_init__(self) -> None:
        if not self.layout:
            object.__setattr__(self, "layout", default_layout().name)
        find(self.layout)  # an unknown name: a UsageError naming --output's choices

    @property
    def fmt(self) -> Layout:
        """The layout itself (its format module's FORMAT)."""
        return find(self.layout)

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
        writer = f"{self.prefix}{self.run_tag}"
        return self.fmt.open(out_dir, journal, self, writer=writer, workers=workers, clock=clock)

    def open_unit(self, out_dir: Path, journal: Journal, ids: list[str]) -> OutputStore:
        """A Ray unit's store: a unit is one shard at most (units are capped at shard_rows),
        named from its rows."""
        digest = hashlib.blake2b("\n".join(ids).encode(), digest_size=6).hexdigest()
        writer = f"{self.prefix}{self.run_tag}-u{digest}"
        return self.fmt.open(out_dir, journal, self, writer=writer, workers=1, clock=None)

    def owns(self, final: str, owns_row: Callable[[str], bool]) -> bool:
        """Whether an output's name (relative to the out dir: a temp file's final name) is a
        write of this job shard's, in any layout; owns_row: the shard owns that row id."""
        return any(fmt.owns_temp(final, self.prefix, owns_row) for fmt in formats().values())

    def clear_temps(self, out_dir: Path, listing: Listing, owns_row: Callable[[str], bool]) -> int:
        """Remove the temp files a killed run of this job shard left among its outputs (other
        shards may be writing theirs right now); how many. The shared views' temps are cleared
        under the results lock."""
        removed = cleanup_temp_files(
            out_dir, owns=lambda final: self.owns(final, owns_row), names=listing.temps
        )
        return removed + cleanup_temp_files(
            out_dir / ARCHIVE_DIR,
            owns=lambda final: self.owns(f"{ARCHIVE_DIR}/{final}", owns_row),
            names=listing.archive_temps,
        )


def writer_prefix(shard_suffix: str) -> str:
    """`-shard-1-of-4` -> `shard-1-of-4-`; unsharded -> ``."""
    return f"{shard_suffix.lstrip('-')}-" if shard_suffix else ""
