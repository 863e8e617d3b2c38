"""results.parquet and metadata.jsonl for a whole out dir, rebuilt from every journal in it.

Shards of one job write into one out dir at the same time, each with its own journal. Whenever
one finishes (and whenever `qtts results OUT` asks) the views are rebuilt from all the journals
under a short lock and replaced atomically, so after the last shard they cover every row. A run
reports its own rows as it always has (this run's results, and rows resumed as done marked
"skipped"); rows of other shards show their latest journalled outcome. A small job file records
which input the out dir belongs to, so the rows can be listed again without the command line.
Knows journals, rows and files; no models, no tensors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qtts.core.jobs.journal import (
    METADATA_NAME,
    RESULTS_NAME,
    read_journals,
    write_metadata,
    write_results,
)
from qtts.core.jobs.writer import atomic_write_bytes, cleanup_temp_files

JOB_FILE = ".qtts-job.json"
RESULTS_LOCK = ".qtts-results.lock"
RESULTS_LOCK_TIMEOUT_S = 300  # another shard rebuilding: seconds at most, even for huge jobs
SHARED_VIEWS = (RESULTS_NAME, METADATA_NAME, JOB_FILE)  # written only under the results lock


@dataclass(frozen=True)
class JobFile:
    kind: str  # "synth" | "batch"
    source: str  # absolute path of the input
    audio_format: str
    num_shards: int


def write_job_file(out_dir: Path, job: JobFile) -> None:
    """Under the results lock (every shard writes the same file)."""
    from filelock import FileLock

    data = json.dumps(job.__dict__, indent=2) + "\n"
    with FileLock(str(out_dir / RESULTS_LOCK), timeout=RESULTS_LOCK_TIMEOUT_S):
        atomic_write_bytes(out_dir / JOB_FILE, data.encode())


def read_job_file(out_dir: Path) -> JobFile:
    path = out_dir / JOB_FILE
    try:
        return JobFile(**json.loads(path.read_text("utf-8")))
    except FileNotFoundError:
        raise ValueError(f"{out_dir} has no {JOB_FILE}: no qtts job has run there") from None
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path} is unreadable: {e}") from None


def result_records(
    out_dir: Path,
    rows: list,
    latest: dict[str, dict[str, Any]],
    *,
    owns: Callable[[str | None], bool],
    this_run: str | None = None,
    skipped: dict[str, dict[str, Any]] | None = None,
    null_id: Callable[[Any], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One record per input row with an outcome. Rows `owns` accepts are this run's: its own
    results (run id this_run), rows it resumed (skipped), and its null-id rows (null_id(row)
    gives their failed record); others show their latest journalled ok or failed. Pending rows
    and ok rows whose file is gone have no record."""
    skipped = skipped or {}
    records = []
    for row in rows:
        mine = owns(row.id)
        if row.id is None:
            if not mine or null_id is None:
                continue
            rec = null_id(row)
        else:
            rec = skipped.get(row.id) if mine else None
            rec = rec or latest.get(row.id)
            if rec is None or rec["status"] not in ("ok", "failed", "skipped"):
                continue
            if mine and rec["status"] != "skipped" and rec.get("run") != this_run:
                continue  # an earlier run's result that this run did not redo: pending
            if rec["status"] == "ok" and not (out_dir / rec["file"]).is_file():
                continue  # journalled, then the write failed
        file = rec.get("file")
        records.append({**rec, "path": str((out_dir / file).resolve()) if file else None})
    return records


def rebuild_views(out_dir: Path, records_for: Callable[[dict], list]) -> list[dict[str, Any]]:
    """Under the out dir's results lock: read every journal, build the records, replace
    results.parquet and metadata.jsonl. Returns the records."""
    from filelock import FileLock

    with FileLock(str(out_dir / RESULTS_LOCK), timeout=RESULTS_LOCK_TIMEOUT_S):
        cleanup_temp_files(out_dir, owns=lambda final: final in SHARED_VIEWS)  # a killed rebuild
        records = records_for(read_journals(out_dir))
        write_results(out_dir, records)
        write_metadata(out_dir, records)
    return records


def rebuild_out_dir(out_dir: Path, source: str | None = None) -> dict[str, Any]:
    """`qtts results OUT`: results.parquet and metadata.jsonl from every journal, for every row
    of the job's input (re-read from where the job file says, or `source`). Every done row shows
    "ok" here (no run is resuming anything); rows with no outcome yet are pending."""
    from qtts.core.jobs.manifest import ManifestError, read_parquet_manifest, read_text_lines

    job = read_job_file(out_dir)
    source = source or job.source
    if source == "-":
        raise ManifestError("the job read stdin: pass the same lines with --input PATH")
    rows = read_text_lines(source) if job.kind == "synth" else read_parquet_manifest(source)

    def null_id(row) -> dict[str, Any]:
        return {"id": None, "row": row.row, "text": row.text, "status": "failed",
                "error": "id is null"}  # fmt: skip

    def records_for(latest):
        return result_records(out_dir, rows, latest, owns=lambda row_id: row_id is None,
                              null_id=null_id)  # fmt: skip

    records = rebuild_views(out_dir, records_for)
    ok = sum(r["status"] in ("ok", "skipped") for r in records)
    failed = sum(r["status"] == "failed" for r in records)
    pending = len(rows) - ok - failed
    return {"total": len(rows), "ok": ok, "failed": failed, "pending": pending,
            "complete": ok == len(rows), "num_shards": job.num_shards,
            "results": str(out_dir / RESULTS_NAME)}  # fmt: skip
