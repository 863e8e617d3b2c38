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

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.records import FAILED, OK, outcomes
from qtts.core.jobs.resume import list_files
from qtts.core.jobs.shards import JOURNAL_GLOB, STATE_GLOB
from qtts.core.jobs.state import read_all
from qtts.core.jobs.writer import atomic_write, cleanup_temp_files

log = logging.getLogger("qtts")

RESULTS_NAME = "results.parquet"
METADATA_NAME = "metadata.jsonl"
RESULTS_LOCK = ".qtts-results.lock"
SHARED_VIEWS = (RESULTS_NAME, METADATA_NAME)
REBUILD_ROUNDS = 3  # rebuild again while other shards' states change under us
RESULT_COLUMNS = ("id", "row", "status", "path", "num_frames", "num_samples", "duration_s",
                  "sample_rate", "seed", "hit_frame_budget", "error", "model", "text", "speaker",
                  "language", "instruct", "ref_audio", "ref_text", "settings")  # fmt: skip
METADATA_BATCH = 1 << 16
RESULTS_COMMAND_WAIT_S = 300  # `qtts results` waits this long for a shard that is rebuilding


@dataclass(frozen=True)
class Counts:
    total: int
    ok: int
    failed: int

    @property
    def pending(self) -> int:
        return self.total - self.ok - self.failed


def build(out_dir: Path, rows: pa.Table, records: pa.Table, listing: pa.Table) -> pa.Table:
    """rows: the input's row, id and text columns (all shards)."""
    recs = outcomes(records)
    listed = pc.index_in(recs["file"], value_set=listing["name"].combine_chunks())
    size = listing["size"].combine_chunks().take(listed)
    present = pc.fill_null(pc.equal(size, recs["bytes"]), False)
    recs = recs.filter(pc.or_(pc.not_equal(recs["status"], OK), present))
    at = pc.index_in(rows["id"], value_set=recs["id"].combine_chunks())
    has = pc.is_valid(at)
    picked = recs.take(pc.drop_null(at))
    picked = picked.set_column(picked.schema.get_field_index("row"), "row",
                               rows["row"].filter(has))  # fmt: skip
    root = str(out_dir.resolve()) + os.sep
    path = pc.binary_join_element_wise(pa.scalar(root), picked["file"], "")
    picked = picked.append_column("path", path)
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

    def write(f) -> None:
        for batch in ok.to_batches(METADATA_BATCH):
            cols = batch.to_pydict()
            lines = [json.dumps({"file_name": os.path.basename(p), "id": i, "text": t,
                                 "speaker": s, "language": lang, "duration": d},
                                ensure_ascii=False) + "\n"
                     for p, i, t, s, lang, d in zip(cols["path"], cols["id"], cols["text"],
                                                    cols["speaker"], cols["language"],
                                                    cols["duration_s"], strict=True)]  # fmt: skip
            f.write("".join(lines).encode())

    atomic_write(out_dir / METADATA_NAME, write)


def rebuild(out_dir: Path, rows: pa.Table, *, wait_s: float) -> Counts | None:
    """Rebuild the views under the results lock; None when another process holds it longer
    than wait_s (it rebuilds after us, seeing our state)."""
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(out_dir / RESULTS_LOCK), timeout=wait_s):
            cleanup_temp_files(out_dir, owns=lambda final: final in SHARED_VIEWS)
            for _ in range(REBUILD_ROUNDS):
                before = _state_stamp(out_dir)
                table = build(out_dir, rows, read_all(out_dir), list_files(out_dir))
                write_views(out_dir, table)
                if _state_stamp(out_dir) == before:
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
    return [*out_dir.glob(STATE_GLOB), *out_dir.glob(JOURNAL_GLOB)]


def _state_stamp(out_dir: Path) -> set[tuple[str, int, int]]:
    """What a finishing shard changes: its state file (journals change all the time)."""
    stamp = set()
    for p in out_dir.glob(STATE_GLOB):
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
    from qtts.core.jobs.jobfile import JOB_FILE, read_job_file

    job = read_job_file(out_dir)
    if job is None:
        raise UsageError(f"{out_dir} holds no qtts job (no {JOB_FILE}): run qtts synth or qtts "
                         "batch with --out-dir there first")  # fmt: skip
    source = source or job.source
    if source == "-":
        raise UsageError("the job read stdin: pass the same lines with --input PATH")
    rows = input_rows(job.kind, source)
    counts = rebuild(out_dir, rows, wait_s=RESULTS_COMMAND_WAIT_S)
    if counts is None:
        raise UsageError(f"another process has held {out_dir / RESULTS_LOCK} for "
                         f"{RESULTS_COMMAND_WAIT_S} s; try again later")  # fmt: skip
    return {"total": counts.total, "ok": counts.ok, "failed": counts.failed,
            "pending": counts.pending, "complete": counts.ok == counts.total,
            "num_shards": job.num_shards, "results": str(out_dir / RESULTS_NAME)}  # fmt: skip
