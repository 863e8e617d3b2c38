"""Rows redone in the files layout never leave a metadata.jsonl that lists a file gone, nor two
copies of one row: another seed (or --overwrite) redoes every row, and in another format each
new file replaces the old one. metadata.jsonl goes before the first old file does, so a kill -9
just after that leaves no view (an AudioFolder loader would fail on a missing file), and the
rerun rebuilds it.
Fake model; the kill in a subprocess (tests/kill_points.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fakes import fake_env, qtts_cmd

KILL_POINTS = Path(__file__).resolve().parents[1] / "kill_points.py"
IDS = [f"u{i}" for i in range(6)]
FILES = "qtts.core.jobs.output.stores.formats.files"
# (the function called through, which call, before or after it, what redoes the rows)
KILLS = [
    (f"{FILES}:unlink_quietly", 2, "after", "--seed"),  # the 1st drops the view; an old WAV gone
    (f"{FILES}:atomic_write_bytes", 1, "after", "--seed"),  # one row done as FLAC, journalled
    (f"{FILES}:atomic_write_bytes", 4, "after", "--seed"),  # rows done as FLAC, others still WAV
    (f"{FILES}:unlink_quietly", 2, "after", "--overwrite"),  # the state forgotten, a WAV gone
]
REDO = {"--seed": ("--seed", "7"), "--overwrite": ("--overwrite",)}


def batch(manifest, out, *extra) -> list[str]:
    return [*map(str, ["batch", manifest, "-o", out, "--model", "fake-0.6b", "--speaker",
                       "vivian", "-q", *extra])]  # fmt: skip


def listed_files_exist(out: Path) -> bool:
    view = out / "metadata.jsonl"
    if not view.exists():
        return True
    names = [json.loads(line)["file_name"] for line in view.read_text().splitlines()]
    return all((out / name).exists() for name in names)


@pytest.mark.parametrize("kill", KILLS, ids=lambda k: f"{k[3][2:]}-{k[0].split(':')[1]}-{k[1]}")
def test_a_kill_while_redone_rows_replace_their_files_leaves_no_stale_view(tmp_path, kill):
    manifest, out = tmp_path / "m.parquet", tmp_path / "out"
    pq.write_table(pa.table({"id": IDS, "text": [f"Row {i} here." for i in IDS]}), manifest)
    made = subprocess.run(qtts_cmd(*batch(manifest, out)), env=fake_env(), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert (out / "metadata.jsonl").exists()

    target, n, when, redo = kill
    again = batch(manifest, out, "-f", "flac", *REDO[redo])
    cmd = [sys.executable, str(KILL_POINTS), target, str(n), when, "--", *again]
    killed = subprocess.run(cmd, env=fake_env(), capture_output=True, text=True, timeout=120)
    assert killed.returncode == 9, killed.stderr  # killed where asked: one WAV already gone
    audio = Counter(p.stem for p in [*out.glob("*.wav"), *out.glob("*.flac")])
    assert len(audio) < len(IDS) or set(p.suffix for p in out.glob("u*.*")) != {".wav"}
    assert max(audio.values()) == 1  # a row being redone: its old copy or its new, never both
    assert not (out / "metadata.jsonl").exists() and listed_files_exist(out)

    rerun = subprocess.run(qtts_cmd(*again), env=fake_env(), capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.stem for p in out.glob("*.flac")) == IDS and not list(out.glob("*.wav"))
    assert listed_files_exist(out) and len((out / "metadata.jsonl").read_text().splitlines()) == 6
