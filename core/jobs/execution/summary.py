"""What a job run reports: counts of its rows by outcome, audio produced, time, where results are.
Printed as the final one-line JSON on stdout; its exit code is the process's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class JobSummary:
    status: str  # done | interrupted | aborted (too many failures)
    exit_code: int
    total: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    pending: int = 0
    hit_frame_budget: int = 0  # ok rows that ran out of frames without EOS
    audio_s: float = 0.0
    wall_s: float = 0.0
    out_dir: str = ""
    results: str = ""
    failure_reasons: dict[str, int] = field(default_factory=dict)  # the most common reasons

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["audio_s"] = round(self.audio_s, 3)
        d["wall_s"] = round(self.wall_s, 3)
        d["audio_s_per_s"] = round(self.audio_s / self.wall_s, 3) if self.wall_s > 0 else None
        return d

    def describe(self) -> str:
        """The closing log line."""
        line = (
            f"{self.status}: {self.ok} ok, {self.failed} failed, {self.skipped} skipped, "
            f"{self.pending} pending; results in {self.results}"
        )
        if self.failure_reasons:
            top = "; ".join(f"{r} ({n})" for r, n in self.failure_reasons.items())
            line += f"; most common failures: {top}"
        return line
