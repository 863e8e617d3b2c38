"""What `qtts results OUT` says of the dataset's quality: percentiles of the measures and scores
over the ok rows of results.parquet, and how many rows fall outside named thresholds.

The thresholds are flags for a person to look at, not verdicts; `qtts results --min-dnsmos ...`
(qtts.core.jobs.output.keep_rules) is how a user decides what metadata.jsonl lists. Read a column
at a time, so 10M rows cost one float column in memory at once. Knows results.parquet's columns; no
models, no audio.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

PERCENTILES = (5, 50, 95)
# The columns summarized, in the order they print; a column the file lacks (not scored) is left
# out.
COLUMNS = (
    "duration_s",
    "chars_per_s",
    "repeat_ratio",
    "silence_ratio",
    "rms_dbfs",
    "rate_ratio_min",
    "rate_ratio_max",
    "dnsmos_ovrl",
    "cer",
    "speaker_sim",
    "speaker_sim_centroid",
)

# Named thresholds: a row beyond one is counted under its name.
CLIPPED_PEAK = 0.999  # peak at full scale: the file clipped (a 16-bit file's max is 0.99997)
MOSTLY_SILENT = 0.5  # silence_ratio above it: more pause than speech
LOOPING = 0.3  # repeat_ratio above it: over 0.3 of the clip's frames sit in a code loop
LOW_DNSMOS = 3.0  # dnsmos_ovrl below it: Emilia's published cut
HIGH_CER = 0.1  # cer above it: the ASR heard another text in 1 character of 10
# chars_per_s beyond this factor of its language's median, either way: speech far too fast or
# too slow for its text. Relative to the median because the rate differs by script (about 14
# letters per second in English, about 4 characters in Chinese).
RATE_FACTOR = 2.0
# rate_ratio beyond this factor of the row's own voice's median, either way (a split row: any of
# its segments): the voice sped up or slowed down (qtts.core.jobs.output.voice_rates).
RATE_DRIFT = 1.5
THRESHOLDS = {
    "hit_frame_budget": "kept at its frame budget without EOS",
    "clipped": f"peak >= {CLIPPED_PEAK}",
    "mostly_silent": f"silence_ratio > {MOSTLY_SILENT}",
    "looping": f"repeat_ratio > {LOOPING}",
    "rate_off": f"chars_per_s beyond {RATE_FACTOR:g}x its language's median, either way",
    "rate_drift": f"a piece's rate beyond {RATE_DRIFT:g}x its voice's median, either way",
    "low_dnsmos": f"dnsmos_ovrl < {LOW_DNSMOS}",
    "high_cer": f"cer > {HIGH_CER}",
}


class OkColumns:
    """results.parquet's columns over its ok rows, read one at a time when asked."""

    def __init__(self, results: Path) -> None:
        self.results = results
        self.names = set(pq.read_schema(results).names)
        status = pq.read_table(results, columns=["status"])["status"]
        self.mask = pc.fill_null(pc.equal(status, "ok"), False).combine_chunks()
        self.count = int(pc.sum(self.mask).as_py() or 0)

    def __call__(self, name: str) -> pa.Array | None:
        """The column's values on ok rows (None: the file has no such column)."""
        if name not in self.names:
            return None
        table = pq.read_table(self.results, columns=[name])
        return table[name].combine_chunks().filter(self.mask)

    def numbers(self, name: str) -> np.ndarray | None:
        """The column's non-null values on ok rows, as float64 (None: no such column)."""
        values = self(name)
        if values is None:
            return None
        return pc.drop_null(values).to_numpy(zero_copy_only=False).astype(np.float64)


def summarize_results(results: Path) -> dict:
    """{"ok": n, "percentiles": {column: {p5, p50, p95, n}}, "outside": {flag: count},
    "kept": n or None}: over the ok rows of `results` (a results.parquet)."""
    column = OkColumns(results)
    percentiles = {}
    for name in COLUMNS:
        numbers = column.numbers(name)
        if numbers is not None and len(numbers):
            qs = np.percentile(numbers, PERCENTILES)
            named = {f"p{p}": round(float(q), 4) for p, q in zip(PERCENTILES, qs, strict=True)}
            percentiles[name] = {**named, "n": len(numbers)}
    outside = {flag: n for flag, n in _flags(column).items() if n is not None}
    kept = column("kept")
    return {
        "ok": column.count,
        "percentiles": percentiles,
        "outside": outside,
        "kept": None if kept is None else int(pc.sum(kept).as_py() or 0),
    }


def _flags(column) -> dict[str, int | None]:
    """Rows beyond each threshold (None: the column is not there)."""

    def count(name: str, test) -> int | None:
        values = column(name)
        return (
            None if values is None else int(pc.sum(pc.fill_null(test(values), False)).as_py() or 0)
        )

    return {
        "hit_frame_budget": count("hit_frame_budget", lambda v: v),
        "clipped": count("peak", lambda v: pc.greater_equal(v, CLIPPED_PEAK)),
        "mostly_silent": count("silence_ratio", lambda v: pc.greater(v, MOSTLY_SILENT)),
        "looping": count("repeat_ratio", lambda v: pc.greater(v, LOOPING)),
        "rate_off": _rate_off(column("chars_per_s"), column("language")),
        "rate_drift": _rate_drift(column("rate_ratio_min"), column("rate_ratio_max")),
        "low_dnsmos": count("dnsmos_ovrl", lambda v: pc.less(v, LOW_DNSMOS)),
        "high_cer": count("cer", lambda v: pc.greater(v, HIGH_CER)),
    }


def _rate_drift(low: pa.Array | None, high: pa.Array | None) -> int | None:
    if low is None or high is None:
        return None
    off = pc.or_(pc.less(low, 1 / RATE_DRIFT), pc.greater(high, RATE_DRIFT))
    return int(pc.sum(pc.fill_null(off, False)).as_py() or 0)


def _rate_off(rate: pa.Array | None, language: pa.Array | None) -> int | None:
    """Rows whose chars_per_s is beyond RATE_FACTOR x the median of their language's rows."""
    if rate is None:
        return None
    groups = pa.nulls(len(rate), pa.string()) if language is None else language.cast(pa.string())
    table = pa.table({"rate": rate, "language": pc.fill_null(groups, "")})
    medians = table.group_by("language").aggregate([("rate", "approximate_median")])
    at = pc.index_in(table["language"], value_set=medians["language"])
    median = medians["rate_approximate_median"].take(at)
    slow = pc.less(table["rate"], pc.divide(median, RATE_FACTOR))
    fast = pc.greater(table["rate"], pc.multiply(median, RATE_FACTOR))
    return int(pc.sum(pc.fill_null(pc.or_(slow, fast), False)).as_py() or 0)


def summary_lines(summary: dict) -> list[str]:
    """The summary for a person, a few lines for stderr."""
    if not summary["ok"]:
        return []
    lines = [f"quality of {summary['ok']:,} ok rows (p5 / p50 / p95):"]
    for name, q in summary["percentiles"].items():
        values = " / ".join(f"{q[f'p{p}']:.3g}" for p in PERCENTILES)
        scored = "" if q["n"] == summary["ok"] else f"  ({q['n']:,} scored)"
        lines.append(f"  {name:<14} {values}{scored}")
    flagged = [f"{flag} {n:,}" for flag, n in summary["outside"].items() if n]
    lines.append(
        "  outside thresholds: "
        + (", ".join(flagged) if flagged else "none")
        + '  (docs/job-state.md, "Quality")'
    )
    if summary["kept"]:
        lines.append(f"  the keep rules keep {summary['kept']:,} of them")
    elif summary["kept"] is not None:
        lines.append("  the keep rules keep none of them")
    return lines
