"""The score columns `qtts score` leaves in OUT/scores.parquet, joined into the views by id and
stamp so that every rebuild keeps them (docs/job-state.md, "Scores"). Knows columns and one file; no
models, no audio.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

log = logging.getLogger("qtts")

SCORES_NAME = "scores.parquet"
# The score values the views carry, in this order after the results' own columns.
SCORE_FIELDS = pa.schema(
    [
        ("dnsmos_sig", pa.float64()),  # DNSMOS P.835: speech signal quality, 1-5
        ("dnsmos_bak", pa.float64()),  # background noise (5: none)
        ("dnsmos_ovrl", pa.float64()),  # overall
        ("asr_text", pa.large_string()),  # what the ASR model heard
        ("cer", pa.float64()),  # character error rate of asr_text against the row's text
        ("wer", pa.float64()),  # word error rate (null for Chinese and Japanese)
        ("speaker_sim", pa.float64()),  # cosine of speaker embeddings: the row's audio and its
        # reference clip (rows that have one)
        ("speaker_sim_centroid", pa.float64()),  # ... the row's and its voice's mean one
    ]
)


def record_stamps(t: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """The stamp of a row's audio in an out dir: its record's time, exactly (the float64's bits
    as a decimal integer), made alike by `qtts score` and every rebuild."""
    if isinstance(t, pa.ChunkedArray):
        t = t.combine_chunks()
    return pc.cast(t.cast(pa.float64()).view(pa.int64()), pa.string())


def with_scores(records: pa.Table, out_dir: Path) -> pa.Table:
    """records (with id and t): SCORE_FIELDS appended, null where a row has no score or a stale
    one. Unchanged without a scores file (an unreadable one is logged: views are still rebuilt)."""
    path = out_dir / SCORES_NAME
    if not path.exists():
        return records
    try:
        names = set(pq.read_schema(path).names)
        wanted = ["id", "stamp", *(f.name for f in SCORE_FIELDS if f.name in names)]
        scores = pq.read_table(path, columns=wanted).combine_chunks()
    except (OSError, pa.ArrowException) as exc:
        log.warning("%s left out of results.parquet: %s", path, str(exc).splitlines()[0])
        return records
    at = pc.index_in(records["id"], value_set=scores["id"])  # one row per id in scores
    fresh = pc.fill_null(pc.equal(scores["stamp"].take(at), record_stamps(records["t"])), False)
    for field in SCORE_FIELDS:
        if field.name in names:
            values = scores[field.name].take(at).cast(field.type)
            column = pc.if_else(fresh, values, pa.nulls(len(values), field.type))
        else:
            column = pa.nulls(records.num_rows, field.type)
        records = records.append_column(field, column)
    return records
