"""The scorers a `qtts score` pass runs, named and chosen before any model loads: DNSMOS P.835,
the ASR round trip and speaker similarity, each with its identity (what makes two of its scores
comparable), the columns it fills, the rows it still needs, and how it loads. A scorer scores a
chunk as `score(clips, rows)`: rows is the dataset's rows of those clips (text, language, ...),
and it returns one tuple of its columns' values per clip, or a str (that clip's reason).
Knows the scorer modules; no files, no tables beyond the rows it is handed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from qtts.core.errors import UsageError
from qtts.core.quality import extra
from qtts.core.quality.audio import Clip, cores
from qtts.core.quality.scores import needs

log = logging.getLogger("qtts")

ScoreFn = Callable[[list[Clip], pa.Table], list]


@dataclass(frozen=True)
class ScoreOptions:
    dnsmos: bool = True
    asr_model: str | None = None
    speaker_model: str | None = "resemblyzer"  # None: no speaker similarity
    device: str = "auto"  # auto | cpu | cuda[:N]: the models' GPU or not
    batch_size: int = 16  # ASR windows per generate call
    overwrite: bool = False  # score every row again


@dataclass
class Scorer:
    name: str  # "dnsmos" | "asr" | "speaker"
    identity: str
    columns: tuple[str, ...]
    done: str  # the column that holds a value once the row is scored
    load: Callable[[], ScoreFn]
    # The speaker scorer's own resume rule, store and closing step (None: the default ones).
    rows_needed: Callable[[pa.Table, object], np.ndarray] | None = None
    flush: Callable[[], None] | None = None
    finish: Callable[[pa.Table, object], pa.Table] | None = None

    def needs(self, table: pa.Table, dataset) -> np.ndarray:
        if self.rows_needed is not None:
            return self.rows_needed(table, dataset)
        return needs(table, self.name, self.identity, self.done)


def choose_scorers(opts: ScoreOptions) -> list[Scorer]:
    """The scorers asked for, with their identities (no model loaded yet)."""
    if not opts.dnsmos and not opts.asr_model and not opts.speaker_model:
        raise UsageError("nothing to score: --no-dnsmos, --no-speaker and no --asr-model")
    scorers = []
    if opts.dnsmos:
        scorers.append(_dnsmos(opts))
    if opts.asr_model:
        scorers.append(_asr(opts))
    if opts.speaker_model:
        scorers.append(_speaker(opts))
    return scorers


def _dnsmos(opts: ScoreOptions) -> Scorer:
    extra.require(extra.DNSMOS_MODULES)
    from qtts.core.quality import dnsmos

    def load() -> ScoreFn:
        model = dnsmos.Dnsmos(opts.device, cores())
        log.info("DNSMOS P.835 on %s, %d threads", model.provider, cores())
        return lambda clips, rows: [tuple(v) for v in model.score([c.audio for c in clips])]

    return Scorer("dnsmos", dnsmos.identity(), dnsmos.COLUMNS, dnsmos.DONE, load)


def _asr(opts: ScoreOptions) -> Scorer:
    extra.require(extra.ASR_MODULES)
    from qtts.core.quality import asr

    directory = asr.model_dir(opts.asr_model)

    def load() -> ScoreFn:
        model = asr.Asr(directory, opts.device, opts.batch_size)
        log.info("ASR %s on %s (%s)", opts.asr_model, model.device, model.dtype)
        return lambda clips, rows: model.score(
            [c.audio for c in clips], rows["text"].to_pylist(), rows["language"].to_pylist()
        )

    return Scorer("asr", asr.identity(directory), asr.COLUMNS, asr.DONE, load)


def _speaker(opts: ScoreOptions) -> Scorer:
    from qtts.core.quality import speaker, speaker_models

    if opts.speaker_model.strip().lower() == speaker_models.RESEMBLYZER:
        extra.require(extra.RESEMBLYZER_MODULES)
    model = speaker_models.choose(opts.speaker_model)
    scorer = speaker.SpeakerScorer(model, opts.device, opts.overwrite)

    def load() -> ScoreFn:
        score = scorer.load()
        log.info("speaker similarity with %s (%s)", opts.speaker_model, model.kind)
        return score

    return Scorer(
        "speaker",
        scorer.identity,
        speaker.COLUMNS,
        speaker.COLUMNS[0],
        load,
        rows_needed=scorer.needs,
        flush=scorer.flush,
        finish=scorer.finish,
    )
