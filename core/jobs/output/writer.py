"""The bytes every output store writes (WAV/FLAC, codes .npy) and what a failed write means
(DiskFullError, OutputError: both fatal); and where the writing time goes (WriterClock: the writer
threads' busy seconds by exclusive part, the synthesis side's waits on them), which a run's summary
reports as `writing`. Standard library only at import (`qtts --help` draws the files layout);
numpy inside the encoders. Knows formats, parts and seconds; no rows, no tensors.
"""

from __future__ import annotations

import errno
import io
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qtts.core.errors import FatalError

if TYPE_CHECKING:
    import numpy as np

AUDIO_FORMATS = ("wav", "flac")
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class DiskFullError(OSError, FatalError):
    """No space (ENOSPC) or quota (EDQUOT) left: fatal; undone rows stay pending for a rerun."""


class OutputError(OSError, FatalError):
    """The out dir cannot be written (permissions, I/O error): fatal."""


def encode_audio(audio: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """float [-1, 1] mono -> WAV or FLAC bytes, 16-bit PCM."""
    import soundfile as sf

    if fmt not in AUDIO_FORMATS:
        raise ValueError(f"unknown audio format {fmt!r}; choose wav or flac")
    import numpy as np

    pcm = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)  # 16-bit wraps, it does not clip
    buf = io.BytesIO()
    sf.write(buf, pcm, sample_rate, subtype="PCM_16", format=fmt.upper())
    return buf.getvalue()


def encode_codes(codes: np.ndarray) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(codes), allow_pickle=False)
    return buf.getvalue()


def write_error(e: OSError, path: Path) -> OSError:
    """A failed write as the job reports it: disk full, or the out dir cannot be written."""
    if e.errno in _DISK_FULL:
        return DiskFullError(e.errno, f"disk full writing {path}: {e.strerror}")
    return OutputError(e.errno, f"cannot write {path}: {e.strerror or e}")


# finish: the clip trimmed, resampled and normalized (--trim-silence, --sample-rate,
# --loudness); encode: WAV/FLAC (and codes) bytes; measures: the row's model-free measures and
# its record; write: the audio into its file or shard, fsynced and renamed; journal: record
# lines, fsynced.
PARTS = ("finish", "encode", "measures", "write", "journal")


class WriterClock:
    """Busy seconds per part, summed over the threads that report to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = dict.fromkeys(PARTS, 0.0)
        self._local = threading.local()  # this thread's open parts: [[name, nested seconds]]

    @contextmanager
    def part(self, name: str):
        stack = self._local.__dict__.setdefault("stack", [])
        frame = [name, 0.0]
        stack.append(frame)
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            stack.pop()
            if stack:
                stack[-1][1] += spent  # the enclosing part does not count it again
            with self._lock:
                self._busy[name] = self._busy.get(name, 0.0) + spent - frame[1]

    def busy(self) -> dict[str, float]:
        with self._lock:
            return dict(self._busy)


@dataclass
class WritingReport:
    """What a run's writing cost, as its summary reports it."""

    threads: int  # the writer threads the run was given (an archive appends on one more)
    wait_s: float = 0.0  # the synthesis loop blocked on the writers (its queue of rows was full)
    drain_s: float = 0.0  # after the last row was synthesized: the writes left, the last shard
    dir_fsync_s: float = 0.0  # the synthesis loop's fsyncs of the out dir (files layout)
    busy_s: dict[str, float] = field(default_factory=dict)  # the writer threads', by part

    def as_dict(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "wait_s": round(self.wait_s, 3),
            "drain_s": round(self.drain_s, 3),
            "dir_fsync_s": round(self.dir_fsync_s, 3),
            # microseconds: a part that ran never reads 0 (a shard's journal lines on a fast disk
            # take well under a millisecond)
            "busy_s": {k: round(v, 6) for k, v in self.busy_s.items()},
        }

    def describe(self) -> str:
        busy = ", ".join(f"{k} {v:.2f} s" for k, v in self.busy_s.items())
        return (
            f"writing: {self.threads} writer thread(s) busy {busy}; synthesis waited "
            f"{self.wait_s:.2f} s on them (queue full) and {self.dir_fsync_s:.2f} s on out-dir "
            f"fsyncs; {self.drain_s:.2f} s of writing after the last row was synthesized"
        )

    def hint(self, synthesis_s: float) -> str | None:
        """One line when the synthesis side waited on the writers for more than 1 s or 2% of
        its time (None otherwise): how long, and what to try."""
        if self.wait_s <= 0 or (self.wait_s < 1.0 and self.wait_s < 0.02 * synthesis_s):
            return None
        share = f" ({self.wait_s / synthesis_s:.0%} of {synthesis_s:.1f} s)" if synthesis_s else ""
        top = max(self.busy_s, key=self.busy_s.get) if self.busy_s else "write"
        why = {
            "encode": "encoding (FLAC costs more than WAV): give the job more CPU cores",
            "measures": "the measures: give the job more CPU cores",
            "finish": "finishing the clips (trim, resample, loudness): give the job more CPU cores",
        }.get(top, "fsyncs to the out dir's disk: put the out dir on a local disk")
        return (
            f"synthesis waited {self.wait_s:.1f} s{share} on its {self.threads} writer "
            f"thread(s), which were busiest {why}"
        )
