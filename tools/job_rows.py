"""A manifest of real English sentences for timing `qtts batch` against `qtts bench --manifest`.

    python tools/job_rows.py /tmp/rows.parquet --rows 2048

Writes a Parquet manifest (id, text, speaker) of `--rows` rows, each 1 to 6 Harvard sentences
(IEEE 1969, "IEEE Recommended Practice for Speech Quality Measurements": public domain; the 720
sentences in tools/data/harvard_sentences.txt, one a line, as tidyverse/stringr's data-raw lists
them) joined into 45 to 220 characters, about 3 to 15 s of speech at ~15 characters a second.
Each row's length is drawn from a log-normal around 8 s
(a TTS corpus's spread: many rows of 5-10 s, fewer short and long ones), then filled with the next
sentences of a shuffled list until it reaches that length. Deterministic: the same --rows and
--seed give the same file, byte for byte. Prints one JSON line: rows, characters (mean, min,
max, p10/p50/p90) and the speech it should make at 15 characters a second.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SENTENCES = Path(__file__).resolve().parent / "data" / "harvard_sentences.txt"
CHARS_PER_S = 15.0  # English read speech, about
MIN_CHARS, MAX_CHARS = 45, 220  # 3 s and ~15 s of speech
MAX_SENTENCES = 6
MEDIAN_S, SIGMA = 8.0, 0.45  # the draw of each row's length: log-normal, clipped to the range
SPEAKERS = ("ryan", "aiden", "vivian", "serena")  # CustomVoice speakers of the published models


def sentences(path: Path = SENTENCES) -> list[str]:
    lines = [s.strip() for s in path.read_text("utf-8").splitlines()]
    return [s for s in lines if s]


def make_rows(n: int, seed: int = 0, pool: list[str] | None = None) -> pa.Table:
    """n rows (id, text, speaker), deterministic in (n, seed)."""
    pool = pool or sentences()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pool))
    targets = np.clip(
        CHARS_PER_S * MEDIAN_S * np.exp(SIGMA * rng.standard_normal(n)), MIN_CHARS, MAX_CHARS
    )
    texts, k = [], 0
    for target in targets:
        picked: list[str] = []
        while len(picked) < MAX_SENTENCES:
            s = pool[order[k % len(order)]]
            longer = len(" ".join([*picked, s]))
            if picked and (longer > MAX_CHARS or longer - target > target - len(" ".join(picked))):
                break  # the row is as close to its target as the next sentence would leave it
            picked.append(s)
            k += 1
        while len(" ".join(picked)) < MIN_CHARS:  # a short draw of short sentences
            picked.append(pool[order[k % len(order)]])
            k += 1
        texts.append(" ".join(picked))
    return pa.table(
        {
            "id": [f"harvard-{i:05d}" for i in range(n)],
            "text": texts,
            "speaker": [SPEAKERS[i % len(SPEAKERS)] for i in range(n)],
        }
    )


def describe(table: pa.Table) -> dict:
    chars = np.array([len(t) for t in table["text"].to_pylist()])
    p10, p50, p90 = np.percentile(chars, [10, 50, 90])
    return {
        "rows": table.num_rows,
        "chars_mean": round(float(chars.mean()), 1),
        "chars_min": int(chars.min()),
        "chars_max": int(chars.max()),
        "chars_p10_p50_p90": [int(p10), int(p50), int(p90)],
        "speech_s_at_15_chars_per_s": round(float(chars.sum()) / CHARS_PER_S, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the manifest to write (.parquet)")
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.rows < 1:
        p.error(f"--rows must be >= 1, got {a.rows}")
    table = make_rows(a.rows, a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, a.out)
    print(json.dumps({"manifest": str(a.out), **describe(table)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
