"""Repacking (docs/job-state.md, "Layout and format switches"): finished rows in another layout or
format move into this run's without the model, a source container at a time. Each row's audio is
checked whole from its header, transcoded losslessly where the format differs, written into the
new layout and committed a batch at a time (repack_commit.py); the records are staged a column at
a time (view_columns.py). Knows records, locations, encodings and batches.
"""

from __future__ import annotations

import io
import itertools
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import FatalError
from qtts.core.jobs.output.stores.layout import OLD_FILE, Layout, Sample
from qtts.core.jobs.output.stores.presence import containers
from qtts.core.jobs.output.stores.registry import holder, read_errors
from qtts.core.jobs.output.stores.repack_commit import INTENT_SCHEMA, commit, retire, take_out
from qtts.core.jobs.output.stores.repack_commit import finish as commit_finish
from qtts.core.jobs.output.view_columns import StagedColumns
from qtts.core.jobs.output.writer import write_error
from qtts.core.jobs.state.jobfile import read_job_file
from qtts.core.jobs.state.journal import Journal
from qtts.core.jobs.state.lock import lock_is_held
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.record_source import RecordSource
from qtts.core.jobs.state.records import RECORD_SCHEMA, index_in

if TYPE_CHECKING:
    from qtts.core.jobs.output.stores.open_store import StoreSpec

log = logging.getLogger("qtts")

MERGE = ("id", "status", "file", "bytes", "run", "t")  # read at once; the rest is staged
STAGED = tuple(name for name in RECORD_SCHEMA.names if name not in MERGE)
STAGE_ROWS = 4096  # records built into Python objects at once
MAGIC = {b"RIFF": "wav", b"fLaC": "flac"}


class StopCheck(Protocol):
    """What a repack asks of the run's signal handlers (execution.interrupt.StopSignals, a
    folder above): check() raises Interrupted once a stopping signal has come."""

    def check(self) -> None: ...


def repack(out_dir: Path, suffix: str, journal: Journal, ids: pa.Array, *, spec: StoreSpec,
           settings: str, run: str, stop: StopCheck) -> tuple[int, int]:  # fmt: skip
    """Move the rows `ids` (done, in another layout or format) into spec's (open_store.StoreSpec)
    layout and format; settings: this run's digest; stop: StopSignals. (rows moved, rows left
    where they were: their audio could not be read back)."""
    if len(ids) == 0:
        return 0, 0
    t0 = time.monotonic()
    mover = _Mover(out_dir, suffix, journal, spec)
    source = RecordSource.open(out_dir, MERGE, STAGED, shard_suffix=suffix)
    source.winners = source.winners.drop_columns(["run"])  # merged on; each record gets `run`
    try:
        shown, where = _in_container_order(source.winners, ids)
        folder = StatePaths(out_dir).repack_staging(suffix)
        with StagedColumns(folder, source, shown, STAGE_ROWS) as staging:
            for name in STAGED:
                staging.stage(name)
            records = _records(source.winners, shown, where, staging, settings=settings, run=run)
            for container, group in itertools.groupby(records, key=lambda pair: pair[0]):
                mover.container(container, {record["id"]: record for _, record in group}, stop)
            mover.commit()
    except BaseException as e:
        mover.target.discard()  # the open batch: its rows stay where they were
        mover.stop()  # the committed rows' old copies go now (or in the next run's first step)
        if isinstance(e, OSError):  # a full disk, an out dir that cannot be written: one line
            raise write_error(e, Path(e.filename) if e.filename else out_dir) from e
        raise
    finally:
        source.close()
    if mover.unread:
        log.warning("%d row(s) could not be read back from their outputs and stay where they are "
                    "(--overwrite makes them again)", mover.unread)  # fmt: skip
    log.info("repacked %d row(s) into %s (%s) in %.1f s, without synthesis", mover.moved,
             spec.layout, spec.audio_format, time.monotonic() - t0)  # fmt: skip
    return mover.moved, mover.unread


class _Mover:
    """Rows into the target a source container at a time, committed as batches fill; the old
    copies of committed rows taken out once their source shard has been read through."""

    def __init__(self, out_dir: Path, suffix: str, journal: Journal, spec: StoreSpec) -> None:
        self.out, self.suffix, self.journal, self.spec = out_dir, suffix, journal, spec
        self.target = spec.fmt.repack_target(out_dir, spec, f"{spec.prefix}{spec.run_tag}")
        self.moved = self.unread = self.batches = 0
        self.reading: str | None = None  # the container being read: its old rows stay
        self.pending: list[tuple[Path, pa.Table]] = []  # committed: (intent, rows not out yet)

    def container(self, name: str, records: dict[str, dict], stop: StopCheck) -> None:
        """records: id -> new record (its `file` still the old location) of the rows in it."""
        spec, source = self.spec, holder(self.out, name)
        # codes the target keeps where they are (files: {id}.codes.npy) are not read
        with_codes = spec.save_codes and not (source is spec.fmt and source.codes_stay)
        self.reading = name  # its old rows stay until it is read through
        for row_id, audio, codes in self._read(source, name, list(records), with_codes):
            stop.check()
            record = records.pop(row_id, None)
            if record is None:
                continue
            try:  # a file cut short or damaged stays where it is, never packed as whole
                check_whole(audio, nbytes=record["bytes"], samples=record["num_samples"])
                audio = in_format(audio, spec.audio_format)
            except (RuntimeError, ValueError) as e:  # soundfile's, or check_whole's
                log.warning("cannot read %s back (%s)", record["file"], e)
                records[row_id] = record
                continue
            self.target.add(record, audio, codes, record["file"])
            if self.target.due():
                self.commit()
        self.reading = None
        self.unread += len(records)
        if not self.target.rows:  # every row read from it is committed: its old copies go
            self.take_out()

    def _read(
        self, source: Layout, name: str, ids: list[str], with_codes: bool
    ) -> Iterator[Sample]:
        try:
            yield from source.read_back(self.out, name, ids, with_codes=with_codes)
        except (OSError, *read_errors()) as e:  # a damaged shard, in any format
            log.warning("cannot read %s back (%s)", self.out / name, e)

    def commit(self) -> None:
        rows = self.target.seal()
        if rows:
            table = pa.Table.from_pylist(rows, schema=INTENT_SCHEMA)
            intent, moved = commit(self.out, self.suffix, self.journal, table, self.batches)
            self.batches += 1
            self.pending.append((intent, moved))
            self.moved += moved.num_rows
        self.take_out()

    def take_out(self) -> None:
        """The committed rows' old copies go, but those in the source shard being read; then
        the intents whose rows are all out."""
        if not self.pending:
            return
        stays = [(intent, rows, _in(rows, self.reading)) for intent, rows in self.pending]
        take_out(self.out, pa.concat_tables([rows.filter(pc.invert(s)) for _, rows, s in stays]))
        left = [(intent, rows.filter(stay)) for intent, rows, stay in stays]
        retire([intent for intent, rows in left if rows.num_rows == 0])
        self.pending = [(intent, rows) for intent, rows in left if rows.num_rows]

    def stop(self) -> None:
        """The repack stops here (a signal, an error): the committed rows' old copies go now, or
        in the next run's first step where that fails too."""
        self.reading = None
        try:
            self.take_out()
        except Exception as e:  # the error that stopped the repack is the one to raise
            log.warning("the next run finishes moving the rows committed so far (%s)", e)


def _in(rows: pa.Table, container: str | None) -> pa.Array:
    """Per row: its old copy is in `container`."""
    if container is None:
        return pa.array(np.zeros(rows.num_rows, dtype=bool))
    return pc.fill_null(pc.equal(containers(rows[OLD_FILE].combine_chunks()), container), False)


def finish_killed(out_dir: Path, suffix: str, journal: Journal) -> None:
    """What a killed repack of this job shard left: its last commit carried out, its staged
    records removed."""
    if commit_finish(out_dir, suffix, journal):
        log.info("finished moving the rows a killed run was repacking")
    shutil.rmtree(StatePaths(out_dir).repack_staging(suffix), ignore_errors=True)


def check_no_killed_switch(out_dir: Path) -> None:
    """FatalError (exit 1) where a switch of layout or format was killed part-way: a job shard's
    repack files are there and no run holds its lock (docs/job-state.md, "Layout and format
    switches")."""
    paths = StatePaths(out_dir)
    left = [p.name for suffix, found in paths.repack_files().items() for p in found
            if not lock_is_held(paths.lock(suffix))]  # fmt: skip
    if not left:
        return
    job = read_job_file(out_dir)  # what to rerun
    into = "" if job is None or job.layout is None else f" --output {job.layout}"
    into += "" if job is None or job.audio_format is None else f" --format {job.audio_format}"
    kind = "qtts synth or qtts batch" if job is None else f"qtts {job.kind}"
    raise FatalError(
        f"{out_dir}: a switch of layout or audio format was killed part-way ({paths.dir.name}/"
        f"{left[0]}{f' and {len(left) - 1} more' if len(left) > 1 else ''}), so its rows are in "
        f"the old layout, the new one or both, and loaders would get part of them: rerun the job "
        f"({kind}{into}, as it was run) to finish the switch, no model is loaded; then qtts results"
    )


def _in_container_order(winners: pa.Table, ids: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(each row's index in winners, the container its audio is in), sorted by container."""
    at = index_in(ids, winners["id"])
    at = at.filter(pc.is_valid(at))
    where = containers(winners["file"].take(at).combine_chunks())
    order = pc.sort_indices(where)
    return at.take(order).to_numpy(zero_copy_only=False), where.take(order)


def _records(
    winners: pa.Table,
    shown: np.ndarray,
    where: pa.Array,
    staging: StagedColumns,
    *,
    settings: str,
    run: str,
) -> Iterator[tuple[str, dict]]:
    """(container, record) of each row in container order, the record with this run's settings
    digest and run; its `t` stays (its scores' stamp), and it wins, journalled after the old."""
    merged = winners.select([name for name in MERGE if name != "run"])
    for k, start in enumerate(range(0, len(shown), staging.size)):
        batch = merged.take(pa.array(shown[start : start + staging.size]))
        for name, column in staging.batch(k):
            batch = batch.append_column(name, column)
        for container, record in zip(
            where.slice(start, staging.size).to_pylist(), batch.to_pylist(), strict=True
        ):
            yield container, {**record, "settings": settings, "run": run}


def audio_format_of(data: bytes) -> str | None:
    return MAGIC.get(bytes(data[:4]))


def check_whole(data: bytes, *, nbytes: int | None, samples: int | None) -> None:
    """Raise ValueError (soundfile: RuntimeError) where the audio is not what its record says:
    another size (a body cut short, in any format: a FLAC's header still gives every sample)
    or another sample count from its header (a WAV's shrinks to the data there). Nothing is
    decoded; a record without the number (None) is not checked by it."""
    import soundfile as sf

    if nbytes is not None and len(data) != nbytes:
        raise ValueError(f"{len(data):,} bytes where {nbytes:,} were written")
    frames = sf.info(io.BytesIO(data)).frames
    if samples is not None and frames != samples:
        raise ValueError(f"{frames:,} samples where {samples:,} were written")


def in_format(data: bytes, audio_format: str) -> bytes:
    """The audio (check_whole first) encoded as `audio_format` (wav | flac), 16-bit PCM as
    written; in the same format, its bytes as they are."""
    import soundfile as sf

    if audio_format_of(data) == audio_format:
        return data
    pcm, rate = sf.read(io.BytesIO(data), dtype="int16")
    out = io.BytesIO()
    sf.write(out, pcm, rate, subtype="PCM_16", format=audio_format.upper())
    return out.getvalue()
