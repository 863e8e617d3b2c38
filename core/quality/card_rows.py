"""What the dataset card says of results.parquet's rows, read a batch at a time: the counts (ok,
failed, pending, kept) and the few values it names (the ok rows' models, settings fingerprints,
archive shards or file suffixes, the kept rows' languages), never a column of every row at once.

Read whole, the card's columns held 3.7 GB at ten million rows (the paths, the digests), and each
ok row's model and settings as a Python string 0.8 GB more: `qtts results` peaked there, not in
the views' rebuild (docs/scale.md). A batch's values are reduced to their distinct ones before
they leave Arrow.
The ids are read only when a card filters them (`ok_and_kept_ids`).
Knows results.parquet's columns; no models, no audio, nothing of the card's format.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# What the card reads of results.parquet (one batch of them at a time, never the ids or texts).
READ = ("status", "kept", "path", "member", "sample_rate", "num_samples", "language", "model")
READ += ("settings",)
BATCH = 1 << 18  # rows per batch read


@dataclass
class CardRows:
    """results.parquet's rows as the card counts and names them."""

    total: int = 0
    ok: int = 0
    failed: int = 0
    kept: int = 0  # ok rows the keep rules keep (every ok row without rules)
    in_files: int = 0  # ok rows in a plain file (no archive member)
    rates: Counter = field(default_factory=Counter)  # the ok rows' sample rates: rows at each
    kept_samples: int = 0  # the kept rows' num_samples, summed
    shard_paths: set[str] = field(default_factory=set)  # of the ok rows' archive shards
    suffixes: set[str] = field(default_factory=set)  # of the ok rows' plain files (".wav")
    languages: set[str] = field(default_factory=set)  # the kept rows'
    models: set[str] = field(default_factory=set)  # the ok rows'
    settings: set[str] = field(default_factory=set)  # the ok rows'

    @property
    def pending(self) -> int:
        return self.total - self.ok - self.failed

    def sample_rates(self) -> list[tuple[int, int]]:
        """(sample rate, ok rows at it), the commonest first: one rate unless a rerun with another
        --sample-rate stopped part way (a loader then resamples each clip to the first)."""
        return sorted(self.rates.items(), key=lambda rc: (-rc[1], rc[0]))

    def add(self, batch: pa.RecordBatch) -> None:
        """Count one batch of results.parquet's READ columns."""
        status = batch.column("status")
        self.total += batch.num_rows
        self.failed += pc.sum(pc.equal(status, "failed")).as_py() or 0
        ok = batch.filter(pc.fill_null(pc.equal(status, "ok"), False))
        if not ok.num_rows:
            return
        names = ok.schema.names
        kept = ok.filter(pc.fill_null(ok.column("kept"), False)) if "kept" in names else ok
        self.ok += ok.num_rows
        self.kept += kept.num_rows
        for c in pc.value_counts(pc.drop_null(ok.column("sample_rate"))).to_pylist():
            self.rates[c["values"]] += c["counts"]
        self.kept_samples += pc.sum(kept.column("num_samples")).as_py() or 0
        in_file = pc.is_null(ok.column("member"))
        files = ok.column("path").filter(in_file)
        self.in_files += len(files)
        found = pc.extract_regex(files, r"(?P<suffix>\.[^./]+)$")  # Arrow, not Path
        self.suffixes |= _distinct(found.field("suffix"))
        self.shard_paths |= _distinct(ok.column("path").filter(pc.invert(in_file)))
        self.languages |= _distinct(kept.column("language"))
        self.models |= _distinct(ok.column("model"))
        self.settings |= _distinct(ok.column("settings"))


def read_card_rows(results: Path) -> CardRows:
    """CardRows of a results.parquet, BATCH rows at a time."""
    rows = CardRows()
    with pq.ParquetFile(results) as file:
        names = [c for c in READ if c in file.schema_arrow.names]
        for batch in file.iter_batches(BATCH, columns=names):
            rows.add(batch)
    return rows


def ok_and_kept_ids(results: Path) -> tuple[pa.Table, pa.Table]:
    """The `id` of the ok rows, and of the kept ones, as one-column tables."""
    names = ["id", "status", *(["kept"] if "kept" in pq.read_schema(results).names else [])]
    table = pq.read_table(results, columns=names)
    ok = table.filter(pc.fill_null(pc.equal(table["status"], "ok"), False))
    kept = ok.filter(pc.fill_null(ok["kept"], False)) if "kept" in names else ok
    return ok.select(["id"]), kept.select(["id"])


def _distinct(values: pa.Array) -> set[str]:
    return set(pc.unique(pc.drop_null(values)).to_pylist())
