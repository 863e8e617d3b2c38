"""results.parquet and metadata.jsonl written for a whole out dir from every shard's records
(docs/job-state.md, "Results"): which record each row shows is decided on a few columns, the rest
staged a column at a time (view_columns.py), and the views written a batch of rows at a time, each
file atomically. Knows records, input ids and locations; no models, no tensors.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.output.keep_rules import KEPT, read_keep_rules
from qtts.core.jobs.output.recorder import MEASURES
from qtts.core.jobs.output.score_columns import SCORE_FIELDS, with_scores
from qtts.core.jobs.output.stores.formats.files import METADATA_KEYS, METADATA_NAME
from qtts.core.jobs.output.stores.presence import Listing, containers, is_archived, members, present
from qtts.core.jobs.output.view_columns import StagedColumns
from qtts.core.jobs.output.voice_rates import RATE_COLUMNS, READ_COLUMNS, rate_ratios
from qtts.core.jobs.state.atomic_files import atomic_write, unlink_quietly
from qtts.core.jobs.state.journal import table_lines
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.record_source import RecordSource
from qtts.core.jobs.state.records import FAILED, OK, RECORD_SCHEMA
from qtts.core.jobs.state.shard_state import UnreadableState

log = logging.getLogger("qtts")

RESULTS_NAME = "results.parquet"
BUILT_FOR = "qtts_out_dir"  # results.parquet's schema metadata: the folder its paths are under
SHARED_VIEWS = (RESULTS_NAME, METADATA_NAME)

RESULT_COLUMNS = (
    "id",
    "row",
    "status",
    "path",
    "member",
    "num_frames",
    "num_samples",
    "duration_s",
    "sample_rate",
    "seed",
    "hit_frame_budget",
    "segments",
    "segment_frames",
    "error",
    "model",
    "text",
    "speaker",
    "language",
    "instruct",
    "ref_audio",
    "ref_text",
    "voice",
    "settings",
)
# The tries a row took, the seed it kept, its model-free measures and its loudness as normalized
# (records.RECORD_SCHEMA).
RESULT_COLUMNS += ("attempts", "kept_seed", "segment_seeds", *MEASURES, "segment_chars_per_s")
RESULT_COLUMNS += ("loudness_lufs", "loudness_status")
# Which record each row shows, and whether its audio is there, is decided on these columns of
# every record; the views' other record columns are read later, one at a time (view_columns.py).
MERGE_COLUMNS = ("id", "status", "file", "bytes", "run", "t")
FROM_RECORDS = tuple(c for c in RESULT_COLUMNS if c not in ("row", "path", "member"))
STAGED_COLUMNS = tuple(c for c in FROM_RECORDS if c not in MERGE_COLUMNS)
BATCH = 1 << 18  # input rows per batch of the views being written


class _NothingListed(Exception):
    """metadata.jsonl would list no row: it is not published (write_views)."""


@dataclass(frozen=True)
class Counts:
    total: int
    ok: int
    failed: int

    @property
    def pending(self) -> int:
        return self.total - self.ok - self.failed


@dataclass
class Picks:
    """Which record each input row shows, decided on the merge columns."""

    rows: pa.Table  # the input's row, id, text
    records: RecordSource  # winners: MERGE_COLUMNS of each id's latest record
    source: np.ndarray  # per input row: the index of its record in records.winners, or -1

    def counts(self) -> Counts:
        shown = self.records.winners["status"].take(pa.array(self.source[self.source >= 0]))
        ok = pc.sum(pc.equal(shown, OK)).as_py() or 0
        failed = (pc.sum(pc.equal(shown, FAILED)).as_py() or 0) + self.rows["id"].null_count
        return Counts(self.rows.num_rows, ok, failed)


def pick(rows: pa.Table, records: RecordSource, listing: Listing) -> Picks:
    """rows: every input row (all shards); records: every shard's latest records."""
    winners = records.winners
    status = winners["status"]
    ok = pc.fill_null(pc.equal(status, OK), False).to_numpy(zero_copy_only=False)
    is_failed = pc.fill_null(pc.equal(status, FAILED), False).to_numpy(zero_copy_only=False)
    keep = is_failed | (ok & present(winners["file"], winners["bytes"], listing))
    kept = np.flatnonzero(keep)
    at = pc.index_in(rows["id"], value_set=winners["id"].take(pa.array(kept)))
    source = np.full(rows.num_rows, -1, dtype=np.int64)
    has = pc.is_valid(at).to_numpy(zero_copy_only=False)
    source[has] = kept[pc.drop_null(at).to_numpy()]
    return Picks(rows, records, source)


def result_batches(
    out_dir: Path, picks: Picks, shown: pa.Table, staged: StagedColumns
) -> Iterator[pa.Table]:
    """results.parquet's rows in input order, `staged.size` input rows at a time. shown: the
    winners' merge columns (and scores), taken here; staged: every other record column."""
    root = pa.scalar(paths_root(out_dir) + os.sep)
    scored = [c for c in SCORE_FIELDS.names if c in shown.column_names]
    kept = (*MERGE_COLUMNS, *RATE_COLUMNS, *scored)
    shown = shown.select([c for c in shown.column_names if c in kept])
    size = staged.size
    for k, start in enumerate(range(0, picks.rows.num_rows, size)):
        rows = picks.rows.slice(start, size)
        source = picks.source[start : start + size]
        has = source >= 0
        taken = shown.take(pa.array(source[has]))
        for name, column in staged.batch(k):
            taken = taken.append_column(name, column)
        taken = taken.append_column("row", rows["row"].filter(pa.array(has)))
        # path: the audio file, or the archive shard holding the row's `member`
        path = pc.binary_join_element_wise(root, containers(taken["file"]), "")
        taken = taken.append_column("path", path).append_column("member", members(taken["file"]))
        # An ok row recorded before qtts split long text was made whole: one segment.
        whole = pc.and_(pc.equal(taken["status"], OK), pc.is_null(taken["segments"]))
        taken = taken.set_column(
            taken.schema.get_field_index("segments"),
            "segments",
            pc.if_else(whole, 1, taken["segments"]),
        )
        null_ids = rows.filter(pc.is_null(rows["id"]))
        if null_ids.num_rows:  # they fail validation and have no record (no id to key it by)
            n = null_ids.num_rows
            extra = pa.table(
                {
                    "row": null_ids["row"],
                    "text": null_ids["text"].cast(pa.large_string()),
                    "status": pa.array([FAILED] * n, pa.string()),
                    "error": pa.array(["id is null"] * n, pa.string()),
                }
            )
            taken = pa.concat_tables([taken, extra], promote_options="default")
            taken = taken.take(pc.sort_indices(taken["row"]))
        yield taken.select([*RESULT_COLUMNS, *RATE_COLUMNS, *scored])


def write_views(out_dir: Path, picks: Picks, into: Path | None = None) -> None:
    """results.parquet and metadata.jsonl in one pass over the batches (each file atomic), with
    the scores and keep rules (a `kept` column); no metadata.jsonl where it would list no row
    (docs/job-state.md, "Results"). into: the folder they are written to; OUT by default."""
    into = out_dir if into is None else into
    shown = with_scores(_with_rates(picks), out_dir)
    scored = [c for c in SCORE_FIELDS.names if c in shown.column_names]
    keys = {**METADATA_KEYS, **{c: c for c in scored}}
    rules = read_keep_rules(out_dir)
    staging = StatePaths(into).view_staging
    staged = StagedColumns(staging, picks.records, picks.source, BATCH)

    def write_both(results_file: BinaryIO, metadata_file: BinaryIO | None = None) -> None:
        schema = _empty_results().schema
        for name in scored:
            schema = schema.append(SCORE_FIELDS.field(name))
        if not rules.empty:
            schema = schema.append(pa.field(KEPT, pa.bool_()))
        schema = schema.with_metadata({BUILT_FOR: paths_root(out_dir)})
        writer = pq.ParquetWriter(results_file, schema, compression="zstd")
        listed = 0
        for batch in result_batches(out_dir, picks, shown, staged):
            is_ok = pc.fill_null(pc.equal(batch["status"], OK), False)
            in_file = pc.invert(pc.fill_null(pc.is_valid(batch["member"]), False))
            if not rules.empty:  # null for a row that is not ok: there is nothing to keep
                kept = pa.array(rules.passes(batch))
                batch = batch.append_column(
                    KEPT, pc.if_else(is_ok, kept, pa.scalar(None, pa.bool_()))
                )
                is_ok = pc.and_(is_ok, kept)
            writer.write_table(batch.cast(schema))
            ok = batch.filter(pc.and_(is_ok, in_file))  # archives carry their own metadata
            ok = ok.append_column("file_name", pc.replace_substring_regex(ok["path"], r"^.*/", ""))
            listed += ok.num_rows
            for data in table_lines(ok, keys) if metadata_file is not None else ():
                metadata_file.write(data)
        writer.close()
        if metadata_file is not None and not listed:
            raise _NothingListed  # results.parquet is whole; metadata.jsonl's temp is dropped

    def write_metadata_or_none(results_file: BinaryIO) -> None:
        try:
            atomic_write(into / METADATA_NAME, lambda f: write_both(results_file, f))
        except _NothingListed:
            unlink_quietly(into / METADATA_NAME)
            if not rules.empty and bool(pc.any(pc.equal(shown["status"], OK)).as_py()):
                log.info("no ok row meets the keep rules (%s): no metadata.jsonl", rules.describe())

    with staged:
        for name in STAGED_COLUMNS:
            staged.stage(name)
        if _archives_only(shown["file"]):
            atomic_write(into / RESULTS_NAME, write_both)
            unlink_quietly(into / METADATA_NAME)
            return
        atomic_write(into / RESULTS_NAME, write_metadata_or_none)


def _with_rates(picks: Picks) -> pa.Table:
    """The winners with each row's speaking rate against its voice's (voice_rates.py)."""
    winners = picks.records.winners
    shown = np.zeros(winners.num_rows, dtype=bool)
    shown[picks.source[picks.source >= 0]] = True
    shown &= pc.fill_null(pc.equal(winners["status"], OK), False).to_numpy(zero_copy_only=False)
    for name, column in rate_ratios(picks.records, shown).items():
        winners = winners.append_column(name, column)
    return winners


def _archives_only(locations: pa.Array) -> bool:
    """Some row sits in an archive shard and none in a plain file."""
    located = pc.drop_null(locations)
    archived = pc.fill_null(is_archived(located), False)
    return bool(len(located)) and bool(pc.all(archived).as_py())


def _empty_results() -> pa.Table:
    schema = RECORD_SCHEMA
    fields = [
        schema.field(c)
        if c in schema.names
        else pa.field(c, pa.int64() if c == "row" else pa.string())
        for c in RESULT_COLUMNS
    ]
    fields += [pa.field(c, pa.float64()) for c in RATE_COLUMNS]
    return pa.schema(fields).empty_table()


def rebuild_once(
    out_dir: Path, rows: pa.Table, listing: Listing, into: Path | None = None
) -> Counts:
    """One round: the records merged, the views written (into OUT, or the folder `into`); the
    states closed, whatever happens."""
    records = None
    try:
        records = RecordSource.open(out_dir, MERGE_COLUMNS, (*STAGED_COLUMNS, *READ_COLUMNS))
        picks = pick(rows, records, listing)
        write_views(out_dir, picks, into)
        return picks.counts()
    except UnreadableState as e:  # the views as they were beat views without a shard
        raise UnreadableState(
            f"{e}; {RESULTS_NAME} and {METADATA_NAME} are kept as they were"
        ) from None
    finally:
        if records is not None:
            records.close()


def paths_root(out_dir: Path) -> str:
    """The folder results.parquet's paths are under, as it records it (BUILT_FOR)."""
    return str(out_dir.resolve())
