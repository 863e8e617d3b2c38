"""The job's record of what is done: a JSON-lines journal, and the views rebuilt from it.

OUT/.qtts-journal.jsonl (one per shard when sharded: .qtts-journal-shard-I-of-N.jsonl) gets one line
per finished row, appended and fsynced (thread-safe). An ok
row is journalled when its audio is durable in a temp file, just before the rename that publishes
it: after any crash every published file has its line (so a rerun never rewrites it), and a line
whose file is missing is simply redone, since resume checks the file. A line cut short by a kill is
ignored; a write that fails after its line gets a "pending" line (latest wins: every record
carries its wall-clock time `t`, which orders records across journals). results.parquet
(one row per input row with a result this run) and the Hugging Face AudioFolder metadata.jsonl
are rebuilt from the journal, atomically.
Knows record fields and files; knows no models, tensors or scheduling.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qtts.core.jobs.writer import atomic_write, atomic_write_bytes
from qtts.core.synthesis.requests import Request, Utterance

log = logging.getLogger("qtts")

JOURNAL_NAME = ".qtts-journal.jsonl"
JOURNAL_GLOB = ".qtts-journal*.jsonl"  # the unsharded journal and every shard's
RESULTS_NAME = "results.parquet"
METADATA_NAME = "metadata.jsonl"

# results.parquet columns, in order (DESIGN.md contract + row, instruct, hit_frame_budget).
RESULT_FIELDS: dict[str, str] = {
    "id": "string",
    "row": "int64",
    "status": "string",  # ok | failed | skipped
    "path": "string",
    "num_frames": "int64",
    "num_samples": "int64",
    "duration_s": "float64",
    "sample_rate": "int64",
    "seed": "int64",
    "hit_frame_budget": "bool",
    "error": "string",
    "model": "string",
    "text": "string",
    "speaker": "string",
    "language": "string",
    "instruct": "string",
}


def _base_record(r, run: str, model: str) -> dict[str, Any]:
    """Fields every record has; `r` is a Request or an InputRow (a row that failed validation)."""
    seed = getattr(r, "seed", None)
    if not isinstance(seed, int) or isinstance(seed, bool):
        seed = None  # a bad seed is why the row failed; the journal keeps ints only
    return {"run": run, "t": time.time(), "id": r.id, "row": r.row, "model": model,
            "text": r.text, "speaker": r.speaker, "language": r.language,
            "instruct": r.instruct, "seed": seed}  # fmt: skip


def failed_record(r, error: str, *, run: str, model: str) -> dict[str, Any]:
    return {**_base_record(r, run, model), "status": "failed", "error": error}


def ok_record(req: Request, audio: AudioInfo, file: str, *, run: str, model: str) -> dict[str, Any]:
    n = audio.num_samples
    return {**_base_record(req, run, model), "status": "ok", "error": None, "file": file,
            "num_frames": audio.num_frames, "num_samples": n, "sample_rate": audio.sample_rate,
            "duration_s": n / audio.sample_rate,
            "hit_frame_budget": audio.hit_frame_budget}  # fmt: skip


@dataclass(frozen=True)
class AudioInfo:
    """What the journal keeps of an utterance (the audio itself stays in its file)."""

    num_frames: int
    num_samples: int
    sample_rate: int
    hit_frame_budget: bool

    @classmethod
    def of(cls, utt: Utterance) -> AudioInfo:
        return cls(int(len(utt.codes)), int(len(utt.audio)), int(utt.sample_rate),
                   bool(utt.hit_frame_budget))  # fmt: skip


def pending_record(row_id: str, *, run: str) -> dict[str, Any]:
    """A row that is not done after all (its write failed after its journal line)."""
    return {"run": run, "t": time.time(), "id": row_id, "status": "pending"}


def read_journals(out_dir: Path) -> dict[str, dict[str, Any]]:
    """The latest record per id across every journal in out_dir (all shards, any N): by time,
    then by order within a journal (records written before times were kept count as oldest)."""
    latest: dict[str, dict[str, Any]] = {}
    for path in sorted(out_dir.glob(JOURNAL_GLOB)):
        for row_id, rec in Journal(out_dir, path.name).read().items():
            old = latest.get(row_id)
            if old is None or rec.get("t", 0) >= old.get("t", 0):
                latest[row_id] = rec
    return latest


class Journal:
    """Append-only, fsynced per append; the latest line for an id wins."""

    def __init__(self, out_dir: Path, name: str = JOURNAL_NAME) -> None:
        self.path = out_dir / name
        self._lock = threading.Lock()  # writer threads and the main thread append

    def read(self) -> dict[str, dict[str, Any]]:
        latest: dict[str, dict[str, Any]] = {}
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return latest
        lines = data.split(b"\n")
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if n < len(lines):  # only the last line can be cut short by a kill
                    log.warning("journal %s: skipping unreadable line %d", self.path, n)
                continue
            if isinstance(rec, dict) and isinstance(rec.get("id"), str):
                latest[rec["id"]] = rec
        return latest

    def reset(self) -> None:
        """Start over (--overwrite): earlier results no longer count as done."""
        atomic_write_bytes(self.path, b"")

    def append(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data  # a killed run left half a line: ours starts a new one
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)


def write_results(out_dir: Path, records: list[dict[str, Any]]) -> Path:
    """results.parquet from `records` (one per input row), atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.type_for_alias(t)) for name, t in RESULT_FIELDS.items()])
    columns = {name: [r.get(name) for r in records] for name in RESULT_FIELDS}
    table = pa.table(columns, schema=schema)
    path = out_dir / RESULTS_NAME
    atomic_write(path, lambda f: pq.write_table(table, f))
    return path


def write_metadata(out_dir: Path, records: list[dict[str, Any]]) -> Path:
    """AudioFolder metadata.jsonl: one line per audio file present (ok and skipped rows)."""
    lines = []
    for r in records:
        if r.get("status") in ("ok", "skipped") and r.get("path"):
            meta = {
                "file_name": Path(r["path"]).name,
                "id": r["id"],
                "text": r.get("text"),
                "speaker": r.get("speaker"),
                "language": r.get("language"),
                "duration": r.get("duration_s"),
            }
            lines.append(json.dumps(meta, ensure_ascii=False) + "\n")
    path = out_dir / METADATA_NAME
    atomic_write_bytes(path, "".join(lines).encode())
    return path
