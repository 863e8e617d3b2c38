"""Rows and records for the store tests: a store gets audio and a record builder, as from the
recorder."""

from __future__ import annotations

import numpy as np

from qtts.core.jobs.output.stores.base import RowOutput
from qtts.core.jobs.state.journal import Journal, read_journals

SR = 24000


def tone(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (0.3 * rng.standard_normal(n)).clip(-1, 1).astype(np.float32)


def row(row_id: str, n: int = 2400, seed: int = 0, codes: bool = False) -> RowOutput:
    audio = tone(n, seed)

    def record(location: str, nbytes: int, codes_saved: bool) -> dict:
        return {
            "id": row_id,
            "status": "ok",
            "file": location,
            "bytes": nbytes,
            "codes_saved": codes_saved,
            "text": f"text of {row_id}",
            "duration_s": n / SR,
            "sample_rate": SR,
            "num_samples": n,
            "run": "r",
            "t": 1.0,
        }

    c = np.arange(32, dtype=np.int64).reshape(2, 16) + seed if codes else None
    return RowOutput(row_id, audio, SR, c, record)


def journalled(journal: Journal) -> list[dict]:
    table, _ = read_journals([journal.path])
    return table.select(["id", "file", "bytes", "codes_saved"]).to_pylist()
