"""What an archived sample carries besides its audio: the row's text and voice, its length and
seeds, and its model-free measures, taken from its ok record. The WebDataset `.json` member
and the Parquet shard's columns hold exactly these, so the two layouts describe a row alike.
Knows record columns; no files.
"""

from __future__ import annotations

import pyarrow as pa

from qtts.core.jobs.output.recorder import MEASURES
from qtts.core.jobs.state.records import RECORD_SCHEMA

SAMPLE_FIELDS = (
    "id",
    "text",
    "speaker",
    "language",
    "instruct",
    "seed",
    "kept_seed",
    "duration_s",
    "sample_rate",
    "num_frames",
    "hit_frame_budget",
    "segments",
    "attempts",
    *MEASURES,
    "model",
    "settings",
)
SAMPLE_SCHEMA = pa.schema([RECORD_SCHEMA.field(name) for name in SAMPLE_FIELDS])


def sample_meta(record: dict) -> dict:
    return {name: record.get(name) for name in SAMPLE_FIELDS}
