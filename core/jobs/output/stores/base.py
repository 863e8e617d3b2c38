"""The output seam: what the job hands a store for each finished row, and what a store promises.

A store publishes a row's audio (and codes) and journals the row's ok record once the audio is
durable, never before and never without it; it finishes the row's clip first (RowOutput.finished),
on its own threads. Where the row lands is the store's business: the
record keeps the opaque location the store gives it (locations.py) and the audio's size. The
job layer never builds a file name; resume, the views and retraction ask the stores' read side
(presence.py, retract.py). Knows the protocol; no formats.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

import numpy as np


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
    layout: str  # registry.FILES or an archive format's name

    def submit(self, row: RowOutput) -> Future[None]:
        """Publish the row; the future settles when the store has taken it (the files layout:
        published and journalled; an archive: in its open shard, journalled when it is sealed)."""
        ...

    def published(self, ids: list[str], since: float) -> dict[str, float]:
        """Of `ids`, those this store already published at or after `since` (wall clock):
        {id: seconds of audio}. A retried Ray unit skips them."""
        ...

    def remove_earlier_output(self, row_id: str) -> None:
        """The row fails in this run: what an earlier run published for it goes, so no file
        outlives its row's failed record (an archive's rows were taken out before the run)."""
        ...

    def close(self, *, wait: bool = True) -> None:
        """wait: finish what was submitted and make it durable (an archive seals its open
        shard); else drop what is not durable yet."""
        ...
