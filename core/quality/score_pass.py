"""The `qtts score` pass: which rows each scorer still has to score, reading and scoring them a
chunk at a time, and PATH/scores.parquet written as it goes (every CHECKPOINT_S, at the end, and
on an error, Ctrl-C or SIGTERM: exit 130 or 143), so an interrupted pass resumes where it
stopped. In a qtts out dir the views (results.parquet, metadata.jsonl) are rebuilt afterwards and
carry the scores.

A file that cannot be read, or that a scorer fails on, fails alone with a one-line reason (its
`error`); the others are scored. A scorer with a closing step (speaker similarity's centroids)
runs it over the whole table once every chunk is scored. One pass at a time per PATH (a lock).
Knows the scorers through scorers.py; no CLI, no printing (the summary is returned, failures are
logged).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import QttsError
from qtts.core.jobs.contract.interfaces import NoProgress, ProgressSink
from qtts.core.jobs.execution.interrupt import Interrupted, StopSignals
from qtts.core.jobs.output.results import MemberReader
from qtts.core.model.hub import one_line
from qtts.core.quality.audio import Clip, cores, read_ahead
from qtts.core.quality.dataset import OUT_DIR, Dataset, open_dataset
from qtts.core.quality.scorers import ScoreOptions, Scorer, choose_scorers
from qtts.core.quality.scores import SCORER_COLUMNS, current, read_scores, scatter
from qtts.core.quality.scores import write_scores as _write
from qtts.core.quality.summary import summarize

log = logging.getLogger("qtts")

CHUNK_ROWS = 64  # rows read ahead and scored together
CHECKPOINT_S = 120.0  # scores.parquet rewritten at most this often: what a kill -9 can lose
REASONS_LOGGED = 20


def score_path(path: Path, opts: ScoreOptions, progress: ProgressSink | None = None) -> dict:
    """Score PATH (a qtts out dir or an AudioFolder); the summary as one dict."""
    from qtts.core.jobs.state.lock import OutDirLock

    scorers = choose_scorers(opts)
    dataset = open_dataset(path)
    with OutDirLock(dataset.lock_path), StopSignals() as stop:
        summary = _score(dataset, scorers, opts, progress or NoProgress(), stop)
    written = summary.pop("written")
    if summary["status"] == "interrupted":  # stop soon, as asked: the views wait for a rerun
        log.warning(
            "interrupted: %d row(s) scored so far are saved in %s; run qtts score again to go "
            "on (it skips them), which also brings results.parquet up to date",
            summary["scored_now"],
            dataset.scores_path,
        )
    elif written and dataset.kind == OUT_DIR:
        _refresh_views(dataset.root)
    return summary


@dataclass
class _Pass:
    dataset: Dataset
    table: pa.Table  # what scores.parquet will hold
    need: dict[str, np.ndarray]  # scorer -> rows it must score
    updates: dict[str, tuple[list[int], list]] = field(
        default_factory=lambda: defaultdict(lambda: ([], []))
    )
    failed: list[tuple[int, str]] = field(default_factory=list)  # (row, reason) this run
    audio_s: float = 0.0

    def put(self, column: str, row: int, value) -> None:
        positions, values = self.updates[column]
        positions.append(row)
        values.append(value)

    def flush(self) -> None:
        self.table = scatter(self.table, self.updates)
        self.updates.clear()
        _write(self.dataset.scores_path, self.table)


def _score(
    dataset: Dataset,
    scorers: list[Scorer],
    opts: ScoreOptions,
    progress: ProgressSink,
    stop: StopSignals,
) -> dict:
    t0 = time.monotonic()
    old = None if opts.overwrite else read_scores(dataset.scores_path)
    table = current(dataset.rows, old, dataset.key)
    run = _Pass(dataset, table, {s.name: s.needs(table, dataset) for s in scorers})
    todo = np.flatnonzero(np.logical_or.reduce(list(run.need.values())))
    reader = MemberReader(dataset.root)
    if dataset.kind == OUT_DIR and len(todo):  # archive members in the order their shards hold
        todo = todo[_reading_order(dataset, todo, reader)]
    written = len(todo) > 0 or old is None or old.num_rows != table.num_rows
    loaded = {s.name: s.load() for s in scorers if run.need[s.name][todo].any()}
    planned = pc.sum(dataset.rows["duration_s"].take(pa.array(todo))).as_py() or 0.0
    chunks = [todo[k : k + CHUNK_ROWS] for k in range(0, len(todo), CHUNK_ROWS)]
    names = dataset.rows["file_name"]
    progress.start(len(todo), planned)
    interrupted, scored_now = None, 0
    try:
        last = time.monotonic()
        paths = _ChunkPaths(reader, names, chunks, locations=dataset.kind == OUT_DIR)
        for chunk, clips in zip(chunks, read_ahead(paths, cores()), strict=True):
            with stop.interruptible():  # Ctrl-C or SIGTERM: this chunk is dropped, the rest kept
                outcomes = _score_chunk(run, scorers, loaded, chunk, clips)
            _commit(run, chunk, clips, outcomes)
            scored_now += len(chunk)
            progress.advance(len(chunk), sum(c.seconds for c in clips))
            if time.monotonic() - last > CHECKPOINT_S:
                _flush(run, scorers)
                last = time.monotonic()
        written = _finish(run, scorers) or written
    except Interrupted as e:  # the chunk in hand dropped; every one before it is kept
        interrupted = e
    finally:
        progress.close()
        if written:
            _flush(run, scorers)  # also on Ctrl-C or an error: what was scored stays scored
    _log_failures(run, names)
    seconds = time.monotonic() - t0
    return {
        **summarize(run.table, todo=len(todo), done=scored_now, failed_now=len(run.failed)),
        "audio_s": round(run.audio_s, 2),
        "seconds": round(seconds, 2),
        "audio_s_per_s": round(run.audio_s / seconds, 2) if seconds > 0 else None,
        "scorers": {s.name: s.identity for s in scorers},
        "scores": str(dataset.scores_path),
        "status": "done" if interrupted is None else "interrupted",
        # 130/143 when a signal stopped the pass; else the command decides (failed files: 3)
        "exit_code": None if interrupted is None else interrupted.exit_code,
        "scored_now": scored_now,
        "written": written,
    }


def _flush(run: _Pass, scorers: list[Scorer]) -> None:
    for scorer in scorers:
        if scorer.flush is not None:
            scorer.flush()  # a scorer's own store first: its rows are marked scored after
    run.flush()


def _finish(run: _Pass, scorers: list[Scorer]) -> bool:
    """Each scorer's closing step over the whole table (the speaker centroids); True when it
    changed the table."""
    changed = False
    for scorer in scorers:
        if scorer.finish is None:
            continue
        if scorer.flush is not None:
            scorer.flush()
        run.table = scatter(run.table, run.updates)
        run.updates.clear()
        table = scorer.finish(run.table, run.dataset)
        changed = changed or not table.equals(run.table)
        run.table = table
    return changed


def _score_chunk(
    run: _Pass, scorers: list[Scorer], loaded: dict, chunk: np.ndarray, clips: list[Clip]
) -> list[tuple[Scorer, list[int], list]]:
    """Each scorer's results for the chunk's readable clips it needs: (scorer, rows, results).
    Records nothing, so a signal may stop it anywhere."""
    rows, outcomes = run.dataset.rows, []
    for scorer in scorers:
        picked = [
            k
            for k, c in enumerate(clips)
            if c.audio is not None and run.need[scorer.name][chunk[k]]
        ]
        if not picked:
            continue
        taken = rows.take(pa.array(chunk[picked]))
        results = _isolated(loaded[scorer.name], [clips[k] for k in picked], taken)
        outcomes.append((scorer, [int(chunk[k]) for k in picked], results))
    return outcomes


def _commit(run: _Pass, chunk: np.ndarray, clips: list[Clip], outcomes: list) -> None:
    """Record a chunk's values, scorer identities and each row's error (null when it scored)."""
    reasons: dict[int, list[str]] = {int(i): [] for i in chunk}
    for i, clip in zip(chunk, clips, strict=True):
        if clip.error:
            reasons[int(i)].append(clip.error)
        run.audio_s += clip.seconds
    for scorer, picked, results in outcomes:
        for i, result in zip(picked, results, strict=True):
            if isinstance(result, str):
                reasons[i].append(f"{scorer.name}: {result}")
                continue
            for column, value in zip(scorer.columns, result, strict=True):
                run.put(column, i, value)
            run.put(SCORER_COLUMNS[scorer.name], i, scorer.identity)
    for i, why in reasons.items():
        run.put("error", i, "; ".join(why) or None)
        if why:
            run.failed.append((i, "; ".join(why)))


def _isolated(score, clips: list[Clip], rows: pa.Table) -> list:
    """score's results for the batch, or, when the batch fails, each clip's alone: a clip that
    fails by itself gets its one-line reason (a str) instead of values."""
    try:
        return score(clips, rows)
    except Exception as exc:  # noqa: BLE001 -- one clip must not fail the others
        if len(clips) == 1:
            return [f"{type(exc).__name__}: {one_line(exc)}"]
    return [_isolated(score, [c], rows.slice(k, 1))[0] for k, c in enumerate(clips)]


def _reading_order(dataset: Dataset, rows: np.ndarray, reader) -> np.ndarray:
    return reader.order(dataset.rows["file_name"].take(pa.array(rows)))


class _ChunkPaths:
    """Each chunk's audio sources (a file's path, or an archive member's reader), made when
    read_ahead asks for the chunk: 10M rows never hold 10M Path objects at once."""

    def __init__(
        self, reader, names: pa.ChunkedArray, chunks: list[np.ndarray], *, locations: bool
    ) -> None:
        """reader: a MemberReader of the dataset's root; locations: the names are a qtts out
        dir's record locations (files or archive members), else an AudioFolder's file names,
        paths under the root whatever they hold."""
        self.reader, self.names, self.chunks = reader, names, chunks
        self.locations = locations

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, k: int) -> list:
        names = self.names.take(pa.array(self.chunks[k])).to_pylist()
        if not self.locations:
            return [self.reader.root / n for n in names]
        return [self.reader.source(n) for n in names]


def _log_failures(run: _Pass, names: pa.ChunkedArray) -> None:
    for i, why in run.failed[:REASONS_LOGGED]:
        log.warning("%s: %s", names[i].as_py(), why)
    if len(run.failed) > REASONS_LOGGED:
        log.warning(
            "... and %d more files failed (their error is in %s)",
            len(run.failed) - REASONS_LOGGED,
            run.dataset.scores_path.name,
        )


def _refresh_views(out_dir: Path) -> None:
    """results.parquet and metadata.jsonl with the new scores (the job's input must be where
    the job recorded it; otherwise `qtts results OUT --input PATH` does it)."""
    from qtts.core.jobs.output.results import rebuild_out_dir

    try:
        rebuild_out_dir(out_dir)
    except (QttsError, OSError) as exc:
        log.warning(
            "results.parquet not rebuilt (%s): run `qtts results %s --input INPUT`",
            one_line(exc),
            out_dir,
        )
        return
    from qtts.core.quality.dataset_card import refresh_card

    refresh_card(out_dir)  # the card shows the new scores (written where there was none)
