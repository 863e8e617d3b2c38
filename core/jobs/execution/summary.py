"""What a job run reports: counts of its rows by outcome, audio produced, time (and where it went:
the model's load, synthesis, the writers), where results are. Printed as the final one-line JSON
on stdout; its exit code is the process's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qtts.core.jobs.output.writer_clock import WritingReport


@dataclass
class JobSummary:
    status: str  # done | interrupted | aborted (too many failures)
    exit_code: int
    total: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    repacked: int = 0  # done rows moved into this run's layout or format, not synthesized
    pending: int = 0
    hit_frame_budget: int = 0  # ok rows that ran out of frames without EOS
    audio_s: float = 0.0
    wall_s: float = 0.0
    out_dir: str = ""
    results: str = ""
    failure_reasons: dict[str, int] = field(default_factory=dict)  # the most common reasons
    load_s: float | None = None  # the model's load (None: nothing was synthesized)
    # From the first chunk to the last row written (the writers' tail included): the span a
    # `qtts bench --manifest` of the same rows is compared with, by synthesis_audio_s_per_s.
    synthesis_s: float | None = None
    writing: WritingReport | None = None  # the local backend's writers (None: Ray, or none)
    # Where the synthesizer's time went (qtts.core.synthesis.synthesis_clock; None: Ray, or none)
    synthesis: dict | None = None
    shard: str = ""  # "shard I of N (from SOURCE)", as the dry run says it (total: its rows)
    # Where the run's time went, from run_job's call: input, scan, load, one-time work,
    # decoding, drain, finish (core/jobs/execution/time_split.py); empty for a dry run
    time_split: dict = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["audio_s"] = round(self.audio_s, 3)
        d["wall_s"] = round(self.wall_s, 3)
        d["audio_s_per_s"] = round(self.audio_s / self.wall_s, 3) if self.wall_s > 0 else None
        for key in ("load_s", "synthesis_s"):
            d[key] = None if d[key] is None else round(d[key], 3)
        synthesis = self.synthesis_s
        d["synthesis_audio_s_per_s"] = round(self.audio_s / synthesis, 3) if synthesis else None
        if self.writing is not None:
            d["writing"] = {**self.writing.as_dict(), "hint": self.writer_hint()}
        return d

    def writer_hint(self) -> str | None:
        """One line when synthesis waited on the writers (core/jobs/output/writer_clock.py)."""
        if self.writing is None:
            return None
        return self.writing.hint(self.synthesis_s or 0.0)

    def describe(self) -> str:
        """The closing log line."""
        repacked = f", {self.repacked} repacked" * bool(self.repacked)
        line = (
            f"{self.status}: {self.ok} ok, {self.failed} failed, {self.skipped} skipped"
            f"{repacked}, {self.pending} pending; results in {self.results}"
        )
        if self.failure_reasons:
            top = "; ".join(f"{r} ({n})" for r, n in self.failure_reasons.items())
            line += f"; most common failures: {top}"
        hint = self.writer_hint()
        return line if hint is None else f"{line}; {hint}"
