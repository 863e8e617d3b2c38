"""From a synthesizer's result to a finished row: its ok record built and handed with its audio
to the output store (which publishes it and journals the record once the audio is durable:
qtts.core.jobs.output.stores), a failed row journalled at once, and a small Outcome for the loop
that counts and reports. A clip the job asks to finish (--trim-silence, --sample-rate,
--loudness: qtts.core.jobs.output.finishing) is finished on the store's writer thread, and its
record (length, rate, loudness, measures) describes the clip as written.

The same recorder runs in a local job and inside each Ray actor (each with its own journal), so a
row is recorded the same way wherever it was synthesized. An ok row's model-free measures
(qtts.core.jobs.output.measures) are computed on the store's writer thread, beside its encoding,
so they never hold up the synthesis loop. A row that hit its frame budget is kept flagged, or
failed, by the run's policy (--on-budget ok | fail | retry: the synthesizer made the retries;
a row that still hit it failed them all).
Knows utterances and records; no file names, no tensors.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from qtts.core.jobs.contract.spec import FinishOptions
from qtts.core.jobs.output.finishing import Finished
from qtts.core.jobs.output.finishing import finish as finish_clip
from qtts.core.jobs.output.measures import measure
from qtts.core.jobs.output.stores.layout import OutputStore, RowOutput
from qtts.core.jobs.output.stores.open_store import StoreSpec
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.state.records import FAILED, OK, failed_record, ok_record
from qtts.core.synthesis.requests import RowFailure, Utterance

log = logging.getLogger("qtts")


@dataclass(frozen=True)
class Outcome:
    """What the synthesis loop needs to know of a finished row."""

    id: str
    status: str  # ok | failed
    duration_s: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class RecordContext:
    """What every record of one run carries, and where its rows go."""

    settings: str  # digest of the job settings
    model: str  # the --model string
    run: str
    on_budget: str  # the budget policy's key (spec.FailurePolicy.key): ok | fail | retry/N
    split: str = "none"  # the split settings' key (spec.SplitOptions.key)
    tries: int = 1  # the tries worth making under retry (GenerationOptions.attempts)
    store: StoreSpec = StoreSpec()  # where the rows go (the files layout unless asked)
    finish: FinishOptions = FinishOptions()  # what each clip goes through before it is written

    def stamp(self) -> dict[str, str]:
        return {
            "settings": self.settings,
            "model": self.model,
            "run": self.run,
            "split": self.split,
            "on_budget": self.on_budget,
        }


def utterance_error(
    utt: Utterance, max_new_tokens: int, on_budget: str, tries: int = 1
) -> str | None:
    """Why an utterance fails its row after synthesis (None: it is fine). on_budget: the
    policy's key; under retry the utterance is the last of its attempts. tries: the tries worth
    making (GenerationOptions.attempts: 1 where neither site samples)."""
    if len(utt.audio) == 0:
        return f"no audio: no frame was generated (max_new_tokens {max_new_tokens})"
    if not np.all(np.isfinite(utt.audio)):
        return "non-finite audio (NaN or inf) from the vocoder"
    if utt.hit_frame_budget:
        budget = f"max_new_tokens {max_new_tokens}, {len(utt.codes)} frames"
        if on_budget == "fail":
            return f"hit the frame budget without EOS ({budget}; --on-budget fail)"
        if on_budget != "ok":  # retry/N: this was the last attempt
            n, policy = utt.attempts, on_budget.replace("/", " --max-attempts ")
            most = on_budget.rpartition("/")[2]
            if most.isdigit() and tries < int(most):  # neither site samples: one try made
                return (
                    f"hit the frame budget without EOS ({budget}); greedy decoding: a retry "
                    "would repeat it (--sample draws)"
                )
            tries = f"in 1 attempt ({budget}" if n == 1 else f"in {n} attempts ({budget} each"
            return f"hit the frame budget without EOS {tries}; --on-budget {policy})"
        log.debug("row %s hit the frame budget without EOS (%s)", utt.id, budget)
    return None


class RowRecorder:
    def __init__(self, store: OutputStore | None, journal: Journal, ctx: RecordContext) -> None:
        self.store, self.journal, self.ctx = store, journal, ctx

    def failed(self, row: dict[str, Any], error: str, attempts: int | None = None) -> Outcome:
        if self.store is not None:  # an earlier run's output of a row failing now
            self.store.remove_earlier_output(row["id"])
        self.journal.append([failed_record(row, error, attempts, **self.ctx.stamp())])
        return Outcome(row["id"], FAILED, error=error)

    def finish(
        self, item: Utterance | RowFailure, row: dict[str, Any], max_new_tokens: int
    ) -> Outcome | Future[Outcome]:
        """A failure is recorded at once; an ok row when its files are written (the future)."""
        if isinstance(item, RowFailure):
            return self.failed(row, item.error, item.attempts)
        error = utterance_error(item, max_new_tokens, self.ctx.on_budget, self.ctx.tries)
        if error is not None:
            return self.failed(row, error, item.attempts)
        output, seconds = self._output(item, row)
        future: Future[Outcome] = Future()

        def done(write: Future[None]) -> None:
            if write.cancelled():  # the store dropped it unwritten (an immediate exit)
                future.cancel()
            elif write.exception() is not None:
                future.set_exception(write.exception())
            else:
                future.set_result(Outcome(item.id, OK, seconds[0]))  # the clip as written

        self.store.submit(output).add_done_callback(done)
        return future

    def _output(self, item: Utterance, row: dict[str, Any]) -> tuple[RowOutput, list[float]]:
        """The row for the store, and a list whose one value is the seconds of its clip as
        written (set once the store has finished the clip)."""
        fields = {
            "num_frames": int(len(item.codes)),
            "hit_frame_budget": bool(item.hit_frame_budget),
            "segments": len(item.segment_frames or (0,)),
            "segment_frames": None if item.segment_frames is None else list(item.segment_frames),
            "segment_chars_per_s": None
            if item.segment_chars_per_s is None
            else list(item.segment_chars_per_s),
            "text_tokens": row.get("text_tokens"),
            **_attempts(item, row),
        }
        codes = item.codes if self.ctx.store.save_codes else None
        seconds = [len(item.audio) / item.sample_rate]

        def output(clip: Finished) -> RowOutput:
            """The row whose audio is `clip`: its record and measures describe that clip."""
            seconds[0] = len(clip.audio) / clip.sample_rate

            def record(location: str, nbytes: int, codes_saved: bool) -> dict[str, Any]:
                measured = measure(clip.audio, item.codes, row.get("text"), clip.sample_rate)
                where = {"file": location, "bytes": nbytes, "codes_saved": codes_saved}
                done = {**fields, **clip.columns(), **measured, **where}
                return ok_record(row, done, **self.ctx.stamp())

            return RowOutput(item.id, clip.audio, clip.sample_rate, codes, record)

        raw = output(Finished(item.audio, int(item.sample_rate)))
        options = self.ctx.finish
        if not options.acts:
            return raw, seconds

        def finished() -> RowOutput:  # on the writer thread: it never holds up synthesis
            return output(finish_clip(item.audio, item.sample_rate, options))

        return replace(raw, finish=finished), seconds


def _attempts(item: Utterance, row: dict[str, Any]) -> dict[str, Any]:
    """The tries a row took and the seed(s) its kept codes were drawn with."""
    seeds = item.segment_seeds
    if seeds is not None:  # a split row: each segment has its own seed
        return {"attempts": item.attempts, "kept_seed": None, "segment_seeds": list(seeds)}
    kept = row.get("seed") if item.seed is None else item.seed  # None: the request's own
    return {"attempts": item.attempts, "kept_seed": kept, "segment_seeds": None}
