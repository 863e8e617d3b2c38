"""Where a synthesizer's time went: passes and their graph captures, decode steps and how full
their slots were, the vocoder's windows and busy time, and how long decoding waited on it.

Counted on the host as the work is handed out (no device reads, no syncs), so a job pays nothing
for it: `qtts bench --manifest` prints it beside its rates, and a run on real rows then says by
itself whether it lost time to engine passes, to half-empty slots, to small vocoder windows or to
decoding waiting on the vocoder. Each field is written by one thread only (the vocoder's by the
vocoder thread). Knows counts and seconds; no tensors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass
class SynthesisClock:
    passes: int = 0  # engine passes (length groups, and their out-of-memory reruns)
    pass_build_s: float = 0.0  # building them: slot state and decode-graph captures
    vocoder_capture_s: float = 0.0  # the speech decoder's window graphs captured ahead of decoding
    # The speech decoder's window graphs captured so far (ahead, or on the vocoder's thread as
    # each shape is first met), and the vocoder thread's seconds in those first-met captures:
    # one-time work, but beside the decode loop instead of before it.
    vocoder_graphs: int = 0
    vocoder_first_met_s: float = 0.0
    decode_steps: int = 0
    slot_steps: int = 0  # decode steps x the pass's slots: what the steps could have made
    frames: int = 0  # frames the engine finished, a retried row's discarded tries included
    vocoder_windows: int = 0
    vocoder_rows: int = 0  # rows over all windows (a row of two windows counts twice)
    vocoder_frames: int = 0  # frames decoded over all windows, padding and context included
    vocoder_s: float = 0.0  # the vocoder thread's busy time, its syncs included
    waited_s: float = 0.0  # decoding blocked on the vocoder (its queue of groups was full)
    tail_s: float = 0.0  # after the last decode step, waiting for the vocoder to finish
    # time.monotonic() when the first and the last decode step were launched (None: no step):
    # edges of the job's time split, not figures (row() leaves them out)
    first_step_at: float | None = None
    last_step_at: float | None = None

    def counting_step(self, step: Callable[[int], None], slots: int) -> Callable[[int], None]:
        """step(view_len) that counts itself: one host call more per decode step, no device work."""

        def counted(view_len: int) -> None:
            self.decode_steps += 1
            self.slot_steps += slots
            self.last_step_at = time.monotonic()
            if self.first_step_at is None:
                self.first_step_at = self.last_step_at
            step(view_len)

        return counted

    def counting_window(self, forward: Callable[[T], T]) -> Callable[[T], T]:
        """The vocoder's forward on one window [rows, Q, frames], counted (vocoder thread). Every
        call counts, so a micro-batch redone after running out of memory counts twice: the
        device did that work."""

        def counted(codes):
            rows, _, frames = codes.shape
            self.vocoder_windows += 1
            self.vocoder_rows += int(rows)
            self.vocoder_frames += int(rows * frames)
            return forward(codes)

        return counted

    @property
    def slot_use(self) -> float | None:
        """Frames made over what the steps could have made (1.0: every slot busy every step)."""
        return self.frames / self.slot_steps if self.slot_steps else None

    @property
    def rows_per_window(self) -> float | None:
        return self.vocoder_rows / self.vocoder_windows if self.vocoder_windows else None

    @property
    def one_time_s(self) -> float:
        """Work done once on the decode loop's thread before it could decode: the passes' builds
        (their graph captures, and the kernel compiles of the captures' warm-up) and the vocoder
        graphs captured ahead."""
        return self.pass_build_s + self.vocoder_capture_s

    def row(self) -> dict:
        edges = ("first_step_at", "last_step_at")
        out = {
            k: round(v, 3) if isinstance(v, float) else v
            for k, v in asdict(self).items()
            if k not in edges
        }
        use, per = self.slot_use, self.rows_per_window
        out["slot_use"] = None if use is None else round(use, 3)
        out["rows_per_window"] = None if per is None else round(per, 2)
        return out

    def describe(self) -> str:
        use = "n/a" if self.slot_use is None else f"{self.slot_use:.0%}"
        per = "n/a" if self.rows_per_window is None else f"{self.rows_per_window:.1f}"
        return (
            f"{self.passes} engine pass(es), built in {self.pass_build_s:.2f} s; "
            f"{self.vocoder_graphs} vocoder graphs ({self.vocoder_capture_s:.2f} s ahead, "
            f"{self.vocoder_first_met_s:.2f} s as first met); {self.decode_steps} decode steps, "
            f"slots {use} "
            f"busy; vocoder {self.vocoder_windows} windows ({per} rows each), busy "
            f"{self.vocoder_s:.2f} s; decoding waited {self.waited_s:.2f} s on it, then "
            f"{self.tail_s:.2f} s after the last step"
        )
