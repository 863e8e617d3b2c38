"""What the layout-switch tests share (tests/cli/test_layout_switch.py and its _checks twin): the
CLI run, where each id's audio is in an out dir (plain files, tar samples, Parquet rows) and what
it holds, the finished out dirs they switch, and a kill -9 at a chosen step of a repack
(tests/kill_points.py)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import soundfile as sf
from fakes import fake_env, qtts_cmd
from typer.testing import CliRunner

from qtts.cli.app import app

ROWS = 10
IDS = [f"r{i:02d}" for i in range(ROWS)]
KILL_POINTS = Path(__file__).resolve().parent / "kill_points.py"
STORES = "qtts.core.jobs.output.stores"


def qtts(manifest, out, *extra, **env):
    args = ["batch", manifest, "-o", out, "--model", "fake-0.6b", "--speaker", "vivian",
            "--save-codes", *extra]  # fmt: skip
    return CliRunner().invoke(app, [str(a) for a in args], env=env or None)


def summary(result) -> dict:
    return json.loads(result.stdout.strip().splitlines()[-1])


def copies(out: Path) -> Counter:
    """Every id's audio in the out dir: plain files, tar samples, Parquet rows."""
    found = Counter(p.name.split(".")[0] for p in out.iterdir() if p.suffix in (".wav", ".flac"))
    for shard in sorted((out / "data").glob("*.tar")):
        with tarfile.open(shard) as tar:
            found.update(json.loads(tar.extractfile(m).read())["id"]
                         for m in tar if m.name.endswith(".json"))  # fmt: skip
    for shard in sorted((out / "data").glob("*.parquet")):
        found.update(pq.read_table(shard, columns=["id"])["id"].to_pylist())
    return found


def audio_and_codes(out: Path) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """id -> (16-bit samples, codes or None where none were saved) wherever the row is."""
    got = {}
    for p in out.iterdir():
        if p.suffix in (".wav", ".flac"):
            row_id = p.name.split(".")[0]
            codes = out / f"{row_id}.codes.npy"
            codes = codes.read_bytes() if codes.exists() else None
            got[row_id] = (sf.read(p, dtype="int16")[0], _codes(codes))
    for shard in sorted((out / "data").glob("*.tar")):
        samples: dict[str, dict[str, bytes]] = {}
        with tarfile.open(shard) as tar:
            for m in tar:
                key, _, ext = m.name.partition(".")
                samples.setdefault(key, {})[ext] = tar.extractfile(m).read()
        for sample in samples.values():
            audio = sample.get("wav") or sample["flac"]
            got[json.loads(sample["json"])["id"]] = (
                sf.read(io.BytesIO(audio), dtype="int16")[0],
                _codes(sample.get("codes.npy")),
            )
    for shard in sorted((out / "data").glob("*.parquet")):
        for row in pq.read_table(shard, columns=["id", "audio", "codes"]).to_pylist():
            audio = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="int16")[0]
            got[row["id"]] = (audio, _codes(row["codes"]))
    return got


def _codes(data: bytes | None) -> np.ndarray | None:
    return np.load(io.BytesIO(data)) if data else None


def metadata_lists_what_is_there(out: Path) -> bool:
    """metadata.jsonl (the AudioFolder view), where there is one, names only files that are there
    (an AudioFolder loader fails on a missing one)."""
    path = out / "metadata.jsonl"
    if not path.exists():
        return True
    names = [json.loads(line)["file_name"] for line in path.read_text().splitlines()]
    return all((out / name).exists() for name in names)


def litter(out: Path) -> list[str]:
    return [p.name for p in out.rglob("*") if ".qtts-tmp-" in p.name]


def assert_same_rows(out: Path, before: dict) -> None:
    assert copies(out) == Counter(IDS)
    after = audio_and_codes(out)
    for row_id, (audio, codes) in before.items():
        np.testing.assert_array_equal(after[row_id][0], audio)
        np.testing.assert_array_equal(after[row_id][1], codes)
    results = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["status"] for r in results] == ["ok"] * ROWS
    assert litter(out) == [] and not list((out / ".qtts").glob("repack*"))


def made_at(out: Path) -> dict[str, float]:
    """Each row's record time: the stamp its scores are kept by."""
    from qtts.core.jobs.state.shard_state import read_all

    records = read_all(out, ("id", "t"))
    return dict(zip(records["id"].to_pylist(), records["t"].to_pylist(), strict=True))


def recorded_where_it_is(out: Path) -> bool:
    """Every id's latest record is ok and its audio is where the record says (the views)."""
    from qtts.core.jobs.output.stores.presence import list_out_dir, present
    from qtts.core.jobs.state.shard_state import read_all

    records = read_all(out, ("id", "status", "file", "bytes"))
    there = present(records["file"], records["bytes"], list_out_dir(out))
    statuses = set(records["status"].to_pylist())
    return sorted(records["id"].to_pylist()) == IDS and bool(there.all()) and statuses == {"ok"}


def make_sources(root: Path) -> tuple[Path, dict]:
    """Finished out dirs to copy: files (wav), webdataset (shards of 3 rows) and parquet (of 4),
    and what their rows hold: (manifest, layout -> (out dir, audio_and_codes))."""
    manifest = root / "m.parquet"
    pq.write_table(pa.table({"id": IDS, "text": [f"Row {i} of a finished job." for i in IDS]}),
                   manifest)  # fmt: skip
    made = {}
    for layout, rows in (("files", 3), ("webdataset", 3), ("parquet", 4)):
        out = root / layout
        r = subprocess.run(qtts_cmd("batch", manifest, "-o", out, "--speaker", "vivian", "--model",
                                    "fake-0.6b", "--save-codes", "-q", "--output", layout,
                                    "--shard-rows", rows),
                           env=fake_env(), capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr
        made[layout] = (out, audio_and_codes(out))
    return manifest, made


# The steps of a repack, in order: (the function called through, which call, before it runs or
# after it returns)
POINTS = {
    "mid-batch": (f"{STORES}.repack:commit", 2, "before"),  # a batch done, the next one's temps
    "mid-write": (f"{STORES}.layout:RepackTarget.write", 5, "before"),  # files: the first batch's
    "intent-written": (f"{STORES}.repack_commit:_name", 1, "before"),  # the commit point
    "first-named": (f"{STORES}.repack_commit:_name", 1, "after"),  # the first batch's outputs
    "journalled": (f"{STORES}.repack_commit:take_out_rows", 1, "before"),  # old copies all there
    "half-removed": (f"{STORES}.retract:_take_out", 2, "before"),  # one old copy gone
    "intent-left": (f"{STORES}.repack_commit:unlink_quietly", 1, "before"),  # all but the intent
}


def kill_at(point: str | tuple, manifest, out, *extra) -> None:
    target, n, when = POINTS[point] if isinstance(point, str) else point
    args = ["batch", manifest, "-o", out, "--speaker", "vivian", "--model", "fake-0.6b",
            "--save-codes", "-q", *extra]  # fmt: skip
    cmd = [sys.executable, str(KILL_POINTS), target, str(n), when, "--", *map(str, args)]
    proc = subprocess.run(cmd, env=fake_env(QTTS_FAKE_LOAD_FAIL="1"), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 9, proc.stderr  # killed where asked, not before or after


def shard_sizes(out: Path) -> list[int]:
    sizes = []
    for shard in (out / "data").iterdir():
        if shard.suffix == ".tar":
            with tarfile.open(shard) as tar:
                sizes.append(sum(m.name.endswith(".json") for m in tar))
        else:
            sizes.append(pq.ParquetFile(shard).metadata.num_rows)
    return sorted(sizes)


def count_take_outs(monkeypatch) -> Counter:
    """container -> how many times a repack or retraction took rows out of it (rewritten or
    removed), from now on."""
    from qtts.core.jobs.output.stores import retract

    touched, take_out = Counter(), retract._take_out

    def counted(fmt, out_dir, container, ids, keep_codes):
        touched[container] += 1
        take_out(fmt, out_dir, container, ids, keep_codes)

    monkeypatch.setattr(retract, "_take_out", counted)
    return touched
