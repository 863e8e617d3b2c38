"""Rows and records for the store tests: a store gets audio and a record builder, as from the
recorder; an archive store of a layout, as a run opens it."""

from __future__ import annotations

import numpy as np

from qtts.core.jobs.output.stores.archive_store import SHARD_MAX_AGE_S, ArchiveStore
from qtts.core.jobs.output.stores.layout import RowOutput
from qtts.core.jobs.output.stores.open_store import StoreSpec
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


def archive_store(out, layout, journal, *, prefix="w", shard_rows=2, save_codes=False,
                  audio_format="wav", max_age_s=SHARD_MAX_AGE_S, encoders=1):  # fmt: skip
    """An archive layout's store, as a run opens it (max_age_s: how old a shard may grow)."""
    spec = StoreSpec(layout=layout, audio_format=audio_format, save_codes=save_codes,
                     shard_rows=shard_rows)  # fmt: skip
    return ArchiveStore(out, spec.fmt, journal, spec, prefix=prefix, max_age_s=max_age_s,
                        encoders=encoders)  # fmt: skip
