"""results.parquet and metadata.jsonl for a whole out dir, rebuilt from every shard's state.

One row per input row that has an outcome, in input order: its latest record (an ok row only if
its file is there), with the row number and absolute path as they are now. Pending rows (not
done, or to be redone) have no row. Shards of one job share the out dir: whenever one finishes,
and whenever `qtts results OUT` asks, the views are rebuilt under a short lock and replaced
atomically. A shard that finds the lock busy leaves the rebuild to the holder, who rebuilds
again if a state changed while it worked, so after the last shard the views cover every row.
Knows records, input ids and files; no models, no tensors.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.jsonl import METADATA_KEYS, table_lines
from qtts.core.jobs.layout import Layout
from qtts.core.jobs.listing import Listing, list_out_dir
from qtts.core.jobs.records import FAILED, OK
from qtts.core.jobs.resume import present
from qtts.core.jobs.state import read_all
from qtts.core.jobs.writer import atomic_write, cleanup_temp_files

log = logging.getLogger("qtts")

RESULTS_NAME = "results.parquet"
METADATA_NAME = "metadata.jsonl"
SHARED_VIEWS = (RESULTS_NAME, METADATA_NAME)

RESULT_COLUMNS = ("id", "row", "status", "path", "num_frames", "num_samples", "duration_s",
                  "sample_rate", "seed", "hit_frame_budget", "error", "model", "text", "speaker",
                  "language", "instruct", "ref_audio", "ref_text", "settings")  # fmt: skip
RESULTS_COMMAND_WAIT_S = 300  # `qtts results` waits this long for a shard that is rebuilding


@dataclass(frozen=True)
class Counts:
    total: int
    ok: int
    failed: int

    @property
    def pending(self) -> int:
        return self.total - self.ok - self.failed


def build(out_dir: Path, rows: pa.Table, records: pa.Table, listing: Listing) -> pa.Table:
    """rows: the input's row, id and text columns (all shards)."""
    # Decide on a few columns, then copy the chosen records once.
    status = records["status"]
    ok = pc.fill_null(pc.equal(status, OK), False).to_numpy(zero_copy_only=False)
    is_failed = pc.fill_null(pc.equal(status, FAILED), False).to_numpy(zero_copy_only=False)
    keep = is_failed | (ok & present(records["file"], records["bytes"], listing))
    kept = np.flatnonzero(keep)
    at = pc.index_in(rows["id"], value_set=records["id"].combine_chunks().take(kept))
    has = pc.is_valid(at)
    wanted = [c for c in RESULT_COLUMNS if c not in ("row", "path")] + ["file"]
    picked = records.select(wanted).take(kept[pc.drop_null(at).to_numpy()])
    root = str(out_dir.resolve()) + os.sep
    path = pc.binary_join_element_wise(pa.scalar(root), picked["file"], "")
    picked = picked.append_column("row", rows["row"].filter(has)).append_column("path", path)
    null_ids = rows.filter(pc.is_null(rows["id"]))
    if null_ids.num_rows:  # they fail validation and have no record (no id to key it by)
        reason = pa.array(["id is null"] * null_ids.num_rows, pa.string())
        failed = pa.array([FAILED] * null_ids.num_rows, pa.string())
        extra = pa.table({"row": null_ids["row"], "text": null_ids["text"], "status": failed,
                          "error": reason})  # fmt: skip
        picked = pa.concat_tables([picked, extra], promote_options="default")
        picked = picked.take(pc.sort_indices(picked["row"]))
    return picked.select(list(RESULT_COLUMNS))


def count(table: pa.Table, total: int) -> Counts:
    status = table["status"]
    ok = pc.sum(pc.equal(status, OK)).as_py() or 0
    failed = pc.sum(pc.equal(status, FAILED)).as_py() or 0
    return Counts(total, ok, failed)


def write_views(out_dir: Path, table: pa.Table) -> None:
    atomic_write(out_dir / RESULTS_NAME, lambda f: pq.write_table(table, f, compression="zstd"))
    ok = table.filter(pc.equal(table["status"], OK))
    ok = ok.append_column("file_name", pc.replace_substring_regex(ok["path"], r"^.*/", ""))

    def write(f) -> None:
        for data in table_lines(ok, METADATA_KEYS):
            f.write(data)

    atomic_write(out_dir / METADATA_NAME, write)


def rebuild(out_dir: Path, rows: pa.Table, *, wait_s: float) -> Counts | None:
    """Rebuild the views under the results lock; None when another process holds it longer
    than wait_s (it rebuilds after us, seeing our state)."""
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(Layout(out_dir).results_lock), timeout=wait_s):
            rounds = 0
            while True:  # again while shards finish under us: each changes its state once
                rounds += 1
                before = _state_stamp(out_dir)
                listing = list_out_dir(out_dir, sizes=False)  # resume checks the sizes
                cleanup_temp_files(out_dir, owns=lambda final: final in SHARED_VIEWS,
                                   names=listing.temps)  # a rebuild that was killed  # fmt: skip
                table = build(out_dir, rows, read_all(out_dir), listing)
                write_views(out_dir, table)
                if _state_stamp(out_dir) == before or rounds > len(before) + 1:
                    break
            return count(table, rows.num_rows)
    except Timeout:
        return None


def up_to_date(out_dir: Path, inputs: list[Path]) -> bool:
    """results.parquet is newer than every state, journal and input it was built from."""
    try:
        built = os.stat(out_dir / RESULTS_NAME).st_mtime_ns
        newest = max((os.stat(p).st_mtime_ns for p in [*_state_files(out_dir), *inputs]),
                     default=0)  # fmt: skip
    except OSError:
        return False
    return newest < built


def _state_files(out_dir: Path) -> list[Path]:
    layout = Layout(out_dir)
    return [*layout.states(), *layout.journals()]


def _state_stamp(out_dir: Path) -> set[tuple[str, int, int]]:
    """What a finishing shard changes: its state file (journals change all the time)."""
    stamp = set()
    for p in Layout(out_dir).states():
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        stamp.add((p.name, st.st_mtime_ns, st.st_size))
    return stamp


def input_rows(kind: str, source: str) -> pa.Table:
    """row, id and text of every input row (text only where an id is null: results need it)."""
    from qtts.core.jobs.manifest import read_parquet_manifest, read_text_lines

    if kind == "synth":
        return read_text_lines(source).select(["row", "id", "text"])
    return read_parquet_manifest(source, columns=("id",), text_if_null_id=True).select(
        ["row", "id", "text"]
    )


def rebuild_out_dir(out_dir: Path, source: str | None = None) -> dict:
    """`qtts results OUT`: the views rebuilt for every row of the job's input (re-read from
    where the job file says, or `source`); the counts as one dict."""
    from qtts.core.errors import UsageError
    from qtts.core.jobs.jobfile import read_job_file

    job = read_job_file(out_dir)
    if job is None:
        raise UsageError(f"{out_dir} holds no qtts job (no .qtts/job.json): run qtts synth or "
                         "qtts batch with --out-dir there first")  # fmt: skip
    source = source or job.source
    if source == "-":
        raise UsageError("the job read stdin: pass the same lines with --input PATH")
    rows = input_rows(job.kind, source)
    counts = rebuild(out_dir, rows, wait_s=RESULTS_COMMAND_WAIT_S)
    if counts is None:
        from qtts.core.errors import LockHeldError

        raise LockHeldError(f"another process has held {Layout(out_dir).results_lock} for "
                            f"{RESULTS_COMMAND_WAIT_S} s; try again later")  # fmt: skip
    return {"total": counts.total, "ok": counts.ok, "failed": counts.failed,
            "pending": counts.pending, "complete": counts.ok == counts.total,
            "num_shards": job.num_shards, "results": str(out_dir / RESULTS_NAME)}  # fmt: skip
