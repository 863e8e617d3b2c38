"""From a synthesizer's result to a finished row: its ok record handed with its audio to the output
store (which journals it once the audio is durable), a failed row journalled at once, and a small
Outcome for the loop that counts. The same recorder runs in a local job and in each Ray actor.
The clip is finished (finishing.py) and measured (`measure`: the measures README lists) on the
store's writer thread, never holding up synthesis, so the record describes the clip as written.
Knows utterances, records and numpy arrays; no file names, no models, no tensors.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from qtts.core.jobs.contract.spec import FinishOptions
from qtts.core.jobs.output.finishing import Finished
from qtts.core.jobs.output.finishing import finish as finish_clip
from qtts.core.jobs.output.stores.layout import OutputStore, RowOutput
from qtts.core.jobs.output.stores.open_store import StoreSpec
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.state.records import FAILED, OK, RECORD_SCHEMA, failed_record, ok_record
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


MEASURES = ("peak", "rms_dbfs", "silence_ratio", "repeat_ratio", "chars_per_s")
# What an archived sample carries besides its audio, from its ok record: a WebDataset `.json`
# member, a Parquet shard's columns and a Shar cut's `custom` describe a row alike.
SAMPLE_FIELDS = (
    "id",
    "text",
    "speaker",
    "language",
    "instruct",
    "seed",
    "kept_seed",
    "duration_s",
    "sample_rate",
    "num_frames",
    "hit_frame_budget",
    "segments",
    "attempts",
    *MEASURES,
    "model",
    "settings",
)
SAMPLE_SCHEMA = pa.schema([RECORD_SCHEMA.field(name) for name in SAMPLE_FIELDS])


def sample_meta(record: dict) -> dict:
    return {name: record.get(name) for name in SAMPLE_FIELDS}


# rms_dbfs of digital silence: finite (a journal line is JSON, which has no -inf) and below the
# quietest non-zero 16-bit signal (-96 dBFS), so it reads as "nothing there".
DBFS_FLOOR = -120.0
# Silence is judged on short frames, 20 ms: shorter than a syllable, so the pauses between words
# count, long enough that one frame's energy is not one cycle of a low voice.
SILENCE_FRAME_S = 0.02
# A frame quieter than this (its RMS, re full scale) is silent: speech sits around -20 to -35
# dBFS, its quietest consonants about 20 dB lower; a codec's hiss in a pause is below -50.
SILENCE_FLOOR_DBFS = -50.0
# Loops, on codebook 0 (12.5 frames a second; README): 2 s, as fluent speech never holds one
# code, syllable or word that long (a pause over 2 s counts: a stuck silence is a failure too).
LOOP_WINDOW = 25
# 8 frames (0.64 s, about a word): every loop is then seen for at least four cycles in a window.
LOOP_MAX_PERIOD = 8
# A sampled loop is not exact: 23 of 25 comparisons equal is still one.
LOOP_MATCH = 0.9


def measure(audio: np.ndarray, codes: np.ndarray, text: str, sample_rate: int) -> dict[str, float]:
    """audio float32 [samples] in [-1, 1]; codes int [frames, groups] -> MEASURES by name."""
    audio = np.asarray(audio, dtype=np.float32)
    duration = len(audio) / sample_rate
    return {
        "peak": peak(audio),
        "rms_dbfs": rms_dbfs(audio),
        "silence_ratio": silence_ratio(audio, sample_rate),
        "repeat_ratio": repeat_ratio(np.asarray(codes)[:, 0] if len(codes) else np.zeros(0)),
        "chars_per_s": chars_per_s(text, duration),
    }


def peak(audio: np.ndarray) -> float:
    """max |sample| of the audio as written (files clip to [-1, 1]): 1.0 means it clipped."""
    if audio.size == 0:
        return 0.0
    return min(max(float(audio.max()), -float(audio.min())), 1.0)


def rms_dbfs(audio: np.ndarray) -> float:
    """The whole clip's RMS in dB re full scale (a full-scale sine: -3.01), at least DBFS_FLOOR."""
    power = float(np.dot(audio, audio)) / audio.size if audio.size else 0.0
    return 10.0 * float(np.log10(max(power, 10.0 ** (DBFS_FLOOR / 10.0))))


def silence_ratio(audio: np.ndarray, sample_rate: int) -> float:
    """The share of SILENCE_FRAME_S frames whose RMS is below SILENCE_FLOOR_DBFS (a trailing
    partial frame is left out, unless the clip is shorter than one frame)."""
    if audio.size == 0:
        return 0.0
    width = min(max(round(SILENCE_FRAME_S * sample_rate), 1), audio.size)
    frames = audio.size // width
    blocks = audio[: frames * width].reshape(frames, width)  # [frames, width]
    power = np.einsum("ij,ij->i", blocks, blocks) / width  # [frames] mean squares
    floor = 10.0 ** (SILENCE_FLOOR_DBFS / 10.0)  # the floor as mean square
    return float(np.count_nonzero(power < floor)) / frames


def repeat_ratio(c0: np.ndarray) -> float:
    """The share of codebook-0 frames inside a loop: LOOP_WINDOW comparisons c0[t] == c0[t - p]
    (p in 1..LOOP_MAX_PERIOD), LOOP_MATCH of them equal; every frame they read is inside it."""
    c0 = np.asarray(c0)
    n = c0.size
    need = int(np.ceil(LOOP_MATCH * LOOP_WINDOW))
    edges = np.zeros(n + 1, dtype=np.int64)  # +1 where a loop span starts, -1 past its end
    for p in range(1, LOOP_MAX_PERIOD + 1):
        if n < p + LOOP_WINDOW:
            break
        same = np.concatenate(([0], np.cumsum(c0[p:] == c0[:-p])))  # same[j]: equal among 0..j-1
        equal = same[LOOP_WINDOW:] - same[:-LOOP_WINDOW]  # window j: comparisons j..j+W-1
        starts = np.flatnonzero(equal >= need)  # comparison j reads frames j and j + p
        edges[starts] += 1  # starts are distinct: no two updates land on one index
        edges[starts + LOOP_WINDOW + p] -= 1
    if n == 0:
        return 0.0
    inside = np.cumsum(edges[:n]) > 0
    return float(np.count_nonzero(inside)) / n


def chars_per_s(text: str | None, duration_s: float) -> float:
    """Characters of the text other than whitespace, per second of audio (0 for no audio)."""
    if not text or duration_s <= 0:
        return 0.0
    return sum(map(len, text.split())) / duration_s  # split(): at any Unicode whitespace
