"""What a run reports (JobSummary: the final one-line JSON; its exit code is the process's) and its
parts counted: the shard's rows from their records, the failed rows said on the terminal
(FailureLog), and where the wall time went (time_split: parts adding up to command_s).
Knows record columns, strings and times; nothing of engines or files.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.output.writer import WritingReport
from qtts.core.jobs.state.records import OK

log = logging.getLogger("qtts")


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
    # The first chunk to the last row written: what `qtts bench --manifest` compares with
    synthesis_s: float | None = None
    writing: WritingReport | None = None  # the local backend's writers (None: Ray, or none)
    # Where the synthesizer's time went (qtts.core.synthesis.synthesis_clock; None: Ray, or none)
    synthesis: dict | None = None
    shard: str = ""  # "shard I of N (from SOURCE)", as the dry run says it (total: its rows)
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
        """One line when synthesis waited on the writers (core/jobs/output/writer.py)."""
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


SHOWN_IN_FULL = 20
TOP_REASONS = 5


class FailureLog:
    def __init__(self) -> None:
        self.reasons: Counter[str] = Counter()
        self.count = 0

    def add(self, row_id: str | None, row: int | None, reason: str) -> None:
        self.count += 1
        self.reasons[reason] += 1
        if self.count <= SHOWN_IN_FULL:
            named = row_id is not None and row_id.strip()  # a blank id names nothing
            name = f"row {one_line(row_id)}" if named else f"row {row} (no id)"
            log.warning("%s: %s", name, one_line(str(reason)))

    def add_table(self, rows: pa.Table) -> None:
        """rows: an Arrow table with id, row and error: the first few said, all counted."""
        if rows.num_rows == 0:
            return
        shown = max(SHOWN_IN_FULL - self.count, 0)
        for r in rows.slice(0, shown).select(["id", "row", "error"]).to_pylist():
            self.add(r["id"], r["row"], r["error"])
        rest = rows.slice(shown)
        self.count += rest.num_rows
        for item in pc.value_counts(rest["error"]).to_pylist():
            self.reasons[item["values"]] += item["counts"]

    def close(self) -> None:
        """After the job: how many more failed, by reason."""
        hidden = self.count - SHOWN_IN_FULL
        if hidden > 0:
            log.warning(
                "... and %d more failed row(s); by reason: %s",
                hidden,
                "; ".join(f"{r} ({n})" for r, n in self.reasons.most_common()),
            )

    def top(self) -> dict[str, int]:
        return dict(self.reasons.most_common(TOP_REASONS))


def one_line(text: str) -> str:
    """text as it is, or, holding a control character (a newline in an id), quoted and escaped
    as the JSON summary writes it: one failure, one log line."""
    return text if text.isprintable() else json.dumps(text)


def _made_now(mine: pa.Table, run_id: str) -> pa.Array:
    """Per row: whether this run made its record (False for a rerun that made nothing)."""
    if "run" not in mine.column_names:
        return pa.nulls(mine.num_rows, pa.bool_()).fill_null(False)
    return pc.fill_null(pc.equal(mine["run"], run_id), False)


def moved_aside(mine: pa.Table, repacked: pa.Array, run_id: str) -> tuple[int, pa.Table]:
    """(rows this run repacked, mine with their `run` cleared): a repacked row's record is this
    run's, but its audio was made before (not counted as made now, nor warned of again)."""
    if len(repacked) == 0 or "run" not in mine.column_names:
        return 0, mine
    moved = pc.and_(pc.fill_null(pc.is_in(mine["id"], value_set=repacked), False),
                    _made_now(mine, run_id))  # fmt: skip
    run = pc.if_else(moved, pa.scalar(None, mine["run"].type), mine["run"])
    at = mine.schema.get_field_index("run")
    return pc.sum(moved).as_py() or 0, mine.set_column(at, "run", run)


def made_now_s(mine: pa.Table, run_id: str) -> float:
    """Seconds of audio this run made, from its records: rows whose files were still being
    written when a signal stopped the outcome stream count too, as they do in `ok`."""
    if "duration_s" not in mine.column_names:
        return 0.0
    ok_now = pc.and_(pc.equal(mine["status"], OK), _made_now(mine, run_id))
    return pc.sum(pc.filter(mine["duration_s"], pc.fill_null(ok_now, False))).as_py() or 0.0


def hit_budget(mine: pa.Table, run_id: str) -> int:
    """The shard's ok rows kept at their frame budget (the summary's count); the warning names
    only those this run made, so a rerun that made nothing does not repeat it."""
    hit = pc.and_(pc.equal(mine["status"], OK), pc.fill_null(mine["hit_frame_budget"], False))
    n = pc.sum(hit).as_py() or 0
    now = pc.sum(pc.and_(hit, _made_now(mine, run_id))).as_py() or 0
    if now:
        log.warning(
            "%d row(s) used their whole frame budget without EOS (kept; hit_frame_budget "
            "is true in results.parquet; --on-budget retry tries them again, --on-budget "
            "fail fails them)",
            now,
        )
    return n


@dataclass
class RunEdges:
    """time.monotonic() at each edge of a run; None where the run never got there."""

    called: float  # run_job called: the input read and validated next, then the lock taken
    run: float | None = None  # the locked run began
    load: float | None = None  # the model's load began (nothing to synthesize: never)
    synthesis: float | None = None  # the loaded backend took the first chunk
    last_step: float | None = None  # the last decode step was launched (the synthesizer's clock)
    written: float | None = None  # the last outcome came back: its row written and recorded


def time_split(edges: RunEdges, end: float, one_time_s: float = 0.0) -> dict[str, float | None]:
    """The parts of the run's wall time (README: input_s ... finish_s), seconds, adding up to
    command_s. scan_s: all before the end when nothing was synthesized; drain_s: None where no
    decode step was counted (a Ray run's steps are its actors')."""
    run = edges.run if edges.run is not None else end
    load = edges.load if edges.load is not None else run
    synthesis = edges.synthesis if edges.synthesis is not None else load
    written = edges.written if edges.written is not None else synthesis
    spans: dict[str, float | None] = {
        "input_s": run - edges.called,
        "scan_s": (edges.load if edges.load is not None else end) - run,
        "load_s": synthesis - load,
    }
    last = edges.last_step
    if edges.synthesis is None:
        spans.update(one_time_s=0.0, decoding_s=0.0, drain_s=None)
    elif last is None:
        spans.update(one_time_s=one_time_s, decoding_s=written - synthesis - one_time_s)
        spans["drain_s"] = None
    else:
        last = min(max(last, synthesis), written)
        spans.update(one_time_s=one_time_s, decoding_s=last - synthesis - one_time_s)
        spans["drain_s"] = written - last
    spans["finish_s"] = end - written if edges.synthesis is not None else 0.0
    spans["command_s"] = end - edges.called
    return {k: None if v is None else round(v, 3) for k, v in spans.items()}
