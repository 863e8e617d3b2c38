"""`qtts bench --manifest`: a job's rows through a job's synthesis path, with nothing written.

The yardstick `qtts batch` is held to on the same rows: the rows are read, validated and
tokenized, their frame budgets set, sorted longest first and cut into chunks by the jobs layer's
own functions (prepare_job, decide_work, chunks: a fresh out dir's run, nothing skipped), and
each chunk goes through synthesize_chunk to the synthesizer a job loads (memory plan, engine,
vocoder, retries under --on-budget, split rows joined). What a job adds after that (records,
measures, encoding, files or shards, journal and fsyncs) is left out, so the job's
synthesis_audio_s_per_s over this bench's audio_s_per_s is what writing costs the job.

Timed: the model's load apart, then synthesis from the first chunk to the last row (the span a
job's `synthesis_s` covers), and the rate over the middle of the run (the rows finishing
between the first and the last tenth of completions: no plan, no graph capture, no tail of a
last group finishing alone). Knows the jobs layer's entry points and the synthesizer protocol;
no files are written (its out dir is a temporary folder that stays empty).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field

from qtts.core.jobs.contract.interfaces import LoadSynthesizer, OpenTextModel
from qtts.core.jobs.contract.spec import JobSpec
from qtts.core.jobs.execution.run import job_work
from qtts.core.jobs.output.recorder import utterance_error
from qtts.core.jobs.work.chunks import chunks, synthesize_chunk
from qtts.core.synthesis.requests import RowFailure

log = logging.getLogger("qtts")
MIDDLE_CUT = 0.1  # the share of completions left out at each end of the middle span


@dataclass
class ManifestBench:
    manifest: str
    rows: int  # rows of the manifest
    ok: int = 0  # as a job would record them: its budget policy applied
    failed: int = 0  # failing validation, or after synthesis
    hit_frame_budget: int = 0  # ok rows kept at their frame budget
    audio_s: float = 0.0  # the ok rows' audio
    frames: int = 0  # the ok rows' frames
    load_s: float = 0.0  # the synthesizer's load
    synthesis_s: float = 0.0  # the first chunk to the last row
    first_row_s: float = 0.0  # the first chunk to the first row out (plan, capture, first group)
    audio_s_per_s: float = 0.0  # audio_s / synthesis_s
    middle_audio_s_per_s: float | None = None  # the middle of the run (None: too few rows)
    middle_rows: int = 0
    budgets: list[int] = field(default_factory=list)  # the smallest and largest max_new_tokens
    precision: str = ""  # what it computed in, as a job's fingerprint spells it
    on_budget: str = ""  # the frame-budget policy (ok: no retries)
    split: str = ""  # the split options (none: every row whole)
    # Where the synthesizer's time went (qtts.core.synthesis.synthesis_clock), as the job's
    # summary has it under the same name: passes, captures, decode steps and slot use, vocoder
    # windows, waits (None: a synthesizer without engine passes, such as the naive generator)
    synthesis: dict | None = None
    synthesis_line: str = ""

    def row(self) -> dict:
        return asdict(self)

    def describe(self) -> list[str]:
        middle = "n/a (too few rows)"
        if self.middle_audio_s_per_s is not None:
            middle = f"{self.middle_audio_s_per_s:.2f} audio-s/s over {self.middle_rows} rows"
        return [
            f"manifest {self.manifest}: {self.rows} rows, {self.ok} ok, {self.failed} failed, "
            f"{self.hit_frame_budget} at their frame budget; {self.audio_s:.1f} s of audio "
            f"({self.frames} frames); max_new_tokens {self.budgets[0]}..{self.budgets[-1]}"
            if self.budgets
            else f"manifest {self.manifest}: {self.rows} rows, nothing to synthesize",
            f"      {self.precision}, on-budget {self.on_budget}, split {self.split}; "
            f"load {self.load_s:.2f} s (not counted)",
            f"      synthesis {self.synthesis_s:.2f} s (first row after {self.first_row_s:.2f} s): "
            f"{self.audio_s_per_s:.2f} audio-s/s; middle of the run {middle}",
            *([f"      synthesis: {self.synthesis_line}"] if self.synthesis_line else []),
        ]


def bench_manifest(
    spec: JobSpec, open_text_model: OpenTextModel, load_synthesizer: LoadSynthesizer
) -> ManifestBench:
    """Every row of spec.source through the job's synthesis path (the spec's out dir is not
    used: a fresh, empty one stands in, so nothing is skipped and nothing is written)."""
    setup, work, options = job_work(spec, open_text_model)
    spec = setup.spec
    res = ManifestBench(
        manifest=spec.source,
        rows=work.total,
        failed=work.rejected.num_rows,
        precision=setup.settings.values["precision"],
        on_budget=spec.failures.key,
        split=spec.split.key,
    )
    if work.todo.num_rows == 0:
        return res
    start = time.perf_counter()
    synth = load_synthesizer(setup.text_model, spec.model.placement)
    res.load_s = time.perf_counter() - start
    done = _synthesize(res, synth, setup, work, options)
    clock = getattr(synth, "clock", None)
    if clock is not None and clock.passes:
        res.synthesis, res.synthesis_line = clock.row(), clock.describe()
    res.first_row_s = done[0][0] if done else res.synthesis_s
    res.audio_s_per_s = res.audio_s / res.synthesis_s if res.synthesis_s > 0 else 0.0
    res.middle_audio_s_per_s, res.middle_rows = middle_rate(done)
    return res


def _synthesize(res: ManifestBench, synth, setup, work, options) -> list[tuple[float, float]]:
    """The chunks through synthesize_chunk, counted into `res` as a job would record them;
    returns (seconds since the first chunk, audio seconds) of each ok row, in completion order."""
    spec = setup.spec
    done: list[tuple[float, float]] = []
    start = time.perf_counter()
    for chunk in chunks(work.todo, setup.text_model, setup.budget, split=spec.split):
        budgets = [*res.budgets, *chunk.budgets.values()]
        res.budgets = [min(budgets), max(budgets)]
        for item in synthesize_chunk(synth, chunk, options, spec.failures.key):
            failed = isinstance(item, RowFailure) or (
                utterance_error(item, chunk.budgets[item.id], res.on_budget, options.attempts)
                is not None
            )
            if failed:
                res.failed += 1
                continue
            audio_s = len(item.audio) / item.sample_rate
            done.append((time.perf_counter() - start, audio_s))
            res.ok += 1
            res.hit_frame_budget += bool(item.hit_frame_budget)
            res.audio_s += audio_s
            res.frames += len(item.codes)
    res.synthesis_s = time.perf_counter() - start
    return done


def middle_rate(done: list[tuple[float, float]]) -> tuple[float | None, int]:
    """(audio-s/s, rows) over the rows finishing after the first MIDDLE_CUT of completions and
    up to the last MIDDLE_CUT: the rate once the run is going, before its tail. None when fewer
    than 10 rows finished, or they finished at one instant."""
    if len(done) < 10:
        return None, 0
    cut = max(1, int(len(done) * MIDDLE_CUT))
    lo, hi = cut - 1, len(done) - 1 - cut
    span = done[hi][0] - done[lo][0]
    if span <= 0:
        return None, 0
    audio = sum(a for _, a in done[lo + 1 : hi + 1])
    return audio / span, hi - lo
