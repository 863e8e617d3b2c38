"""What each output layout costs per row to write: the same rows published through the files
store and the two archive stores (encoding, measures excluded, journal and fsyncs included).

    python tools/output_cost.py --rows 2000 --seconds 5 --work-dir /tmp/qtts-output-cost

Prints a table on stderr and one JSON line on stdout: ms per row, MB/s of audio written, bytes on
disk per row and the files each layout leaves. Each row's audio is its own quiet noise, which
FLAC and the Parquet shard's zstd barely shrink, so the figures are the container's cost, not a
codec's. Rows are made as they are published: the time includes making the noise, the same for
every layout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from qtts.core.jobs.output.stores.layout import RowOutput
from qtts.core.jobs.output.stores.open_store import StoreSpec
from qtts.core.jobs.state.journal import Journal

SAMPLE_RATE = 24000


def rows(n: int, seconds: float) -> Iterator[RowOutput]:
    """Rows of distinct noise, made as they are published (a row repeated would compress to
    nothing in a Parquet shard)."""
    rng = np.random.default_rng(0)

    def make(row_id: str) -> RowOutput:
        audio = (0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)

        def record(location: str, nbytes: int, codes_saved: bool) -> dict:
            return {"id": row_id, "status": "ok", "file": location, "bytes": nbytes,
                    "codes_saved": codes_saved, "text": "a sentence of text", "t": time.time(),
                    "duration_s": seconds, "sample_rate": SAMPLE_RATE}  # fmt: skip

        return RowOutput(row_id, audio, SAMPLE_RATE, None, record)

    return (make(f"utt-{i:09d}") for i in range(n))


def publish(layout: str, out: Path, todo: Iterator[RowOutput], n: int, shard_rows: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    (out / ".qtts").mkdir(parents=True)
    store = StoreSpec(layout=layout, shard_rows=shard_rows, run_tag="cost").open(
        out, Journal(out / ".qtts" / "journal.jsonl")
    )
    t0 = time.perf_counter()
    pending = []
    for r in todo:
        pending.append(store.submit(r))
        while len(pending) > 64:  # as the job: a bounded number of rows waiting for the disk
            pending.pop(0).result()
    for future in pending:
        future.result()
    store.close()
    seconds = time.perf_counter() - t0
    files = [p for p in out.rglob("*") if p.is_file() and ".qtts" not in p.parts]
    size = sum(p.stat().st_size for p in files)
    return {"ms_per_row": round(1000 * seconds / n, 3),
            "audio_mb_per_s": round(size / seconds / 1e6, 1),
            "bytes_per_row": round(size / n), "files": len(files)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--seconds", type=float, default=5.0, help="audio per row")
    p.add_argument("--shard-rows", type=int, default=1000)
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/qtts-output-cost"))
    a = p.parse_args(argv)
    report = {}
    for layout in ("files", "webdataset", "parquet"):
        todo = rows(a.rows, a.seconds)
        report[layout] = publish(layout, a.work_dir / layout, todo, a.rows, a.shard_rows)
        r = report[layout]
        print(f"{layout:<11} {r['ms_per_row']:>7.2f} ms/row {r['audio_mb_per_s']:>7.1f} MB/s "
              f"{r['bytes_per_row']:>9,} B/row {r['files']:>6} files", file=sys.stderr)  # fmt: skip
    print(json.dumps({"rows": a.rows, "seconds_per_row": a.seconds, **report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
