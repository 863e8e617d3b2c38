"""The dataset job at dataset scale: time and peak RSS of the job layer on 100k..10M-row manifests.

    python tools/scale_bench.py --rows 100000,1000000 --model tiny-model --work-dir /tmp/qtts-scale

--output webdataset|parquet measures the archive layouts; --parts N reads the manifest as a folder
of N Parquet parts; --switch webdataset|parquet measures a layout switch instead (below).

For each size it builds a Parquet manifest of sentences, then runs, each as its own `qtts` process
under /usr/bin/time -v (wall time and peak RSS):

  dry-run      qtts batch --dry-run on a fresh out dir (read, validate, shard, resume scan, plan)
  rerun        qtts batch on an out dir where every row is already done (nothing to synthesize)
  results      qtts results on an out dir split into 4 finished shards
  shard        qtts batch --num-shards 100000 --shard-index 7 on a fresh out dir (synthesizes the
               few rows of that shard with the model, then rebuilds results for every row)

The finished out dirs are built directly, not synthesized (a million files of real audio would
take days on a CPU): each row gets a record made by the job layer's own functions from its
validated row and job settings, and its audio file is a hard link to one small WAV, so the resume
scan sees a real file of the recorded size (with --output webdataset|parquet, each shard of
--shard-rows rows is a copy of one small valid shard: resume and the views check shard names
and never open them). tests/unit/jobs/test_scale_bench.py checks that a
rerun skips every row of such an out dir, exactly as it does after a real run.

--switch LAYOUT builds a finished files out dir (its WAVs --wav-samples long) and runs instead:

  switch-dry   qtts batch --output LAYOUT --dry-run on it (every row to repack)
  switch       qtts batch --output LAYOUT on it: every row repacked, no synthesis (each WAV read
               back, written into shards of --shard-rows, the files removed)
  rerun        qtts batch --output LAYOUT again: a finished LAYOUT job with real shards
Prints a table on stderr and one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

WORDS = ("the quiet river carried small boats past old stone houses while children ran along "
         "its banks and a bell rang somewhere in the town as evening light turned gold over "
         "fields of wheat and distant hills").split()  # fmt: skip
LINKS_PER_FILE = 60_000  # ext4 allows 65,000 hard links to one inode


def make_manifest(path: Path, rows: int, seed: int = 0, batch: int = 1_000_000,
                  parts: int = 1) -> None:  # fmt: skip
    """rows of id (utt-NNNNNNNNN) and text (6-24 words, a sentence each); parts > 1: `path` is
    a folder of that many Parquet files."""
    rng = np.random.default_rng(seed)
    schema = pa.schema([("id", pa.string()), ("text", pa.string())])
    if parts > 1:
        path.mkdir(parents=True, exist_ok=True)
        per_part = -(-rows // parts)
        for k in range(parts):
            n = max(0, min(per_part, rows - k * per_part))
            _write_rows(path / f"part-{k:05d}.parquet", rng, schema, k * per_part, n, batch)
        return
    _write_rows(path, rng, schema, 0, rows, batch)


def _write_rows(path: Path, rng, schema: pa.Schema, first: int, rows: int, batch: int) -> None:
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for start in range(first, first + rows, batch):
            n = min(batch, first + rows - start)
            lengths = rng.integers(6, 25, size=n)
            picks = rng.integers(0, len(WORDS), size=int(lengths.sum()))
            words = np.array(WORDS, dtype=object)[picks]
            ends = np.cumsum(lengths)
            texts = [" ".join(words[e - k : e]).capitalize() + "."
                     for e, k in zip(ends, lengths, strict=True)]  # fmt: skip
            ids = [f"utt-{i:09d}" for i in range(start, start + n)]
            writer.write_table(pa.table({"id": ids, "text": texts}, schema=schema))


# Plausible ranges of each model-free measure (qtts.core.jobs.output.recorder) for the fake records.
MEASURE_RANGES = {"peak": (0.3, 1.0), "rms_dbfs": (-40.0, -10.0), "silence_ratio": (0.0, 0.4),
                  "repeat_ratio": (0.0, 0.2), "chars_per_s": (8.0, 20.0)}  # fmt: skip


def finish_job(manifest: Path, out: Path, model: str, num_shards: int = 1, open_text_model=None,
               layout: str = "files", samples: int = 1920) -> int:  # fmt: skip
    """Make `out` look exactly like a finished `qtts batch MANIFEST --speaker vivian --device
    cpu` of num_shards shards: job file, settings, one state per shard, a file per row (every
    one `samples` long), the views. Returns the rows."""
    from qtts.core.jobs.contract.spec import (
        JobSpec,
        ModelOptions,
        OutputOptions,
        RowDefaults,
        VoiceOptions,
    )
    from qtts.core.jobs.execution.out_dir import write_job_files
    from qtts.core.jobs.execution.run import prepare_job, source_path
    from qtts.core.jobs.output.results import input_rows, rebuild
    from qtts.core.jobs.output.writer import encode_audio
    from qtts.core.jobs.state.paths import StatePaths
    from qtts.core.jobs.state.records import OK, RECORD_SCHEMA
    from qtts.core.jobs.state.shard_state import write_state
    from qtts.core.jobs.state.shards import Shard

    StatePaths(out).dir.mkdir(parents=True, exist_ok=True)
    if open_text_model is None:
        from qtts.core.synthesis.session import open_text_model
    spec = JobSpec(kind="batch", source=str(manifest), output=OutputOptions(out, layout=layout),
                   model=ModelOptions(model, device="cpu"),
                   voice=VoiceOptions(RowDefaults(speaker="vivian")))  # fmt: skip
    setup, req, _, _ = prepare_job(spec, open_text_model, env={})
    valid = setup.prepared.valid()
    n = valid.num_rows
    wav = encode_audio(np.zeros(samples, np.float32), setup.text_model.sample_rate, "wav")
    names = pc.binary_join_element_wise(valid["id"], pa.scalar("wav"), ".")
    if layout != "files":
        names, shard_names = _archive_locations(valid["id"], layout, spec.output.shard_rows)
    columns = {name: valid[name] for name in valid.column_names if name != "error"}
    columns.update(
        status=pa.array(np.full(n, OK, dtype=object), pa.string()), file=names,
        bytes=pa.array(np.full(n, len(wav), dtype=np.int64)),
        num_frames=pa.array(np.ones(n, dtype=np.int64)),
        num_samples=pa.array(np.full(n, samples, dtype=np.int64)),
        sample_rate=pa.array(np.full(n, setup.text_model.sample_rate, dtype=np.int64)),
        duration_s=pa.array(np.full(n, samples / setup.text_model.sample_rate)),
        hit_frame_budget=pa.array(np.zeros(n, dtype=bool)),
        segments=pa.array(np.ones(n, dtype=np.int64)),
        settings=pa.array(np.full(n, setup.settings.digest, dtype=object), pa.string()),
        split=pa.array(np.full(n, setup.spec.split.key, dtype=object), pa.string()),
        model=pa.array(np.full(n, model, dtype=object), pa.string()),
        run=pa.array(np.full(n, "scale-bench", dtype=object), pa.string()),
        t=pa.array(np.full(n, time.time())),
        attempts=pa.array(np.ones(n, dtype=np.int64)), kept_seed=valid["seed"],
        on_budget=pa.array(np.full(n, setup.spec.failures.key, dtype=object), pa.string()),
    )  # fmt: skip
    # The measures as a real job records them: distinct floats, which compress as real ones do.
    rng = np.random.default_rng(0)
    columns.update(
        {name: pa.array(rng.uniform(lo, hi, n)) for name, (lo, hi) in MEASURE_RANGES.items()}
    )
    records = pa.table({f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in RECORD_SCHEMA},
                       schema=RECORD_SCHEMA)  # fmt: skip
    for index in range(num_shards):
        shard = Shard(num_shards, index, "--num-shards/--shard-index")
        own = records.filter(pa.array(shard.mask(records["id"])))
        write_state(StatePaths(out).state(shard.suffix), own)
    from dataclasses import replace

    from qtts.core.jobs.state.shards import ShardRequest

    req = ShardRequest(num_shards, 0, "--num-shards/--shard-index") if num_shards > 1 else req
    scale_out = replace(setup.spec.scale_out, num_shards=num_shards)
    setup = replace(
        setup, shard=Shard(num_shards, 0), spec=replace(setup.spec, scale_out=scale_out)
    )
    write_job_files(setup, req, source_path(spec))
    if layout == "files":
        _link_files(out, names, wav)
    else:
        _place_shards(out, shard_names, layout, wav)
    rebuild(out, input_rows("batch", str(manifest)), wait_s=60)  # a finished job has its views
    return n


def _link_files(out: Path, names: pa.Array, wav: bytes) -> None:
    templates: list[Path] = []
    for k, name in enumerate(names.to_pylist()):
        if k % LINKS_PER_FILE == 0:
            templates.append(out / f".template-{len(templates)}.wav")
            templates[-1].write_bytes(wav)
        target = out / name
        if not target.exists():
            os.link(templates[-1], target)
    for t in templates:
        t.unlink()


def _archive_locations(ids: pa.Array, layout: str, shard_rows: int) -> tuple[pa.Array, list]:
    """Each row's member location in shards of shard_rows rows, as a run would record them."""
    from qtts.core.jobs.output.stores.archive import ArchiveShard
    from qtts.core.jobs.output.stores.registry import find

    fmt = find(layout)
    shard_names = [f"scalebench-{k:06d}" for k in range(-(-len(ids) // shard_rows))]
    shards = [ArchiveShard(fmt, Path("data"), name) for name in shard_names]
    at = (np.arange(len(ids)) // shard_rows).tolist()
    members = [fmt.member(i, "wav") for i in ids.to_pylist()]
    locations = [shards[k].location(m) for k, m in zip(at, members, strict=True)]
    return pa.array(locations, pa.string()), shard_names


def _place_shards(out: Path, shard_names: list[str], layout: str, wav: bytes) -> None:
    """One small valid shard, its every part copied under every shard's name (a hard link
    each, as files are)."""
    from qtts.core.jobs.output.stores.registry import find

    fmt = find(layout)
    data = out / "data"
    data.mkdir(exist_ok=True)
    templates = {}

    def open_part(part):
        templates[part] = open(data / f".template-{len(templates)}", "wb")
        return templates[part]

    writer = fmt.writer(open_part, 24000)
    record = {"id": "template", "duration_s": 0.08, "sample_rate": 24000, "num_samples": 1920}
    writer.add("template", wav, "wav", None, record)
    writer.close()
    for part, f in templates.items():
        f.close()
        for name in shard_names:
            if not (data / part.name(name)).exists():
                os.link(f.name, data / part.name(name))
        os.unlink(f.name)


def timed(cmd: list[str], env: dict[str, str]) -> dict:
    """Run under /usr/bin/time -v: wall seconds, peak RSS (MB), exit code, last stdout line."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", proc.stderr)
    parts = [float(x) for x in wall.group(1).split(":")] if wall else [float("nan")]
    seconds = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    return {"wall_s": round(seconds, 2), "peak_rss_mb": int(rss.group(1)) // 1024 if rss else None,
            "exit": proc.returncode, "summary": json.loads(last),
            "stderr_tail": proc.stderr.splitlines()[-30:] if proc.returncode else []}  # fmt: skip


def bench(rows: int, work: Path, model: str, layout: str = "files", parts: int = 1) -> dict:
    base = work / f"{rows}-{layout}-{parts}"
    base.mkdir(parents=True, exist_ok=True)
    manifest = base / ("manifest" if parts > 1 else "manifest.parquet")
    if not manifest.exists():
        make_manifest(manifest, rows, parts=parts)
    qtts = [sys.executable, "-m", "qtts"]
    common = ["--model", model, "--speaker", "vivian", "--device", "cpu", "-q", "--output", layout]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true"}
    out = {}
    fresh = base / "fresh"
    out["dry-run"] = timed([*qtts, "batch", str(manifest), "-o", str(fresh), "--dry-run",
                            *common], env)  # fmt: skip
    done = base / "done"
    if not (done / ".qtts" / "state.parquet").exists():
        _finish_in_a_process(manifest, done, model, 1, layout)
    out["rerun"] = timed([*qtts, "batch", str(manifest), "-o", str(done), *common], env)
    shards = base / "done-4-shards"
    if not (shards / ".qtts" / "job.json").exists():
        _finish_in_a_process(manifest, shards, model, 4, layout)
    out["results"] = timed([*qtts, "results", str(shards)], env)
    one = base / "one-shard"
    out["shard"] = timed([*qtts, "batch", str(manifest), "-o", str(one), "--num-shards", "100000",
                          "--shard-index", "7", "--max-new-tokens", "8", *common],
                         env)  # fmt: skip
    return out


def bench_switch(rows: int, work: Path, model: str, layout: str, samples: int,
                 shard_rows: int) -> dict:  # fmt: skip
    """A finished files job switched to `layout`: its dry run, the repack, a rerun after it.
    The out dir is built afresh each time (the switch moves its rows)."""
    base = work / f"{rows}-files-1"
    base.mkdir(parents=True, exist_ok=True)
    manifest = base / "manifest.parquet"
    if not manifest.exists():
        make_manifest(manifest, rows)
    out_dir = base / f"switch-{layout}"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    _finish_in_a_process(manifest, out_dir, model, 1, "files", samples)
    cmd = [sys.executable, "-m", "qtts", "batch", str(manifest), "-o", str(out_dir), "--model",
           model, "--speaker", "vivian", "--device", "cpu", "-q", "--output", layout,
           "--shard-rows", str(shard_rows)]  # fmt: skip
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true"}
    return {"switch-dry": timed([*cmd, "--dry-run"], env), "switch": timed(cmd, env),
            "rerun": timed(cmd, env)}  # fmt: skip


def _finish_in_a_process(manifest: Path, out: Path, model: str, shards: int, layout: str,
                         samples: int = 1920) -> None:  # fmt: skip
    """finish_job in a child, so its memory is gone before the measured commands run."""
    cmd = [sys.executable, __file__, "--finish", str(manifest), str(out), "--model", model,
           "--shards", str(shards), "--output", layout, "--wav-samples", str(samples)]  # fmt: skip
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--finish",
        nargs=2,
        metavar=("MANIFEST", "OUT"),
        help="only build a finished out dir (used by the benchmark itself)",
    )
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--rows", default="100000,1000000", help="comma-separated manifest sizes")
    p.add_argument("--model", required=True, help="checkpoint dir (e.g. a tiny checkpoint)")
    p.add_argument("--work-dir", default="/tmp/qtts-scale", type=Path)
    p.add_argument("--output", default="files", choices=("files", "webdataset", "parquet"))
    p.add_argument("--parts", type=int, default=1, help="read the manifest as a folder of N parts")
    p.add_argument("--switch", choices=("webdataset", "parquet"),
                   help="measure a switch of a finished files job to this layout")  # fmt: skip
    p.add_argument("--wav-samples", type=int, default=1920, help="each built row's WAV length")
    p.add_argument("--shard-rows", type=int, default=1000, help="--switch: the new shards' rows")
    a = p.parse_args(argv)
    if a.finish:
        finish_job(Path(a.finish[0]), Path(a.finish[1]), a.model, a.shards, layout=a.output,
                   samples=a.wav_samples)  # fmt: skip
        return 0
    report = {}
    for rows in (int(r) for r in a.rows.split(",")):
        if a.switch:
            report[rows] = bench_switch(rows, a.work_dir, a.model, a.switch, a.wav_samples,
                                        a.shard_rows)  # fmt: skip
        else:
            report[rows] = bench(rows, a.work_dir, a.model, a.output, a.parts)
        for name, r in report[rows].items():
            s = r["summary"]
            what = {k: s.get(k) for k in ("total", "to_synthesize", "to_repack", "skipped", "ok",
                                            "repacked", "failed", "pending", "complete")
                    if k in s}  # fmt: skip
            print(f"{rows:>10,} {name:<8} {r['wall_s']:>8.1f} s {r['peak_rss_mb']:>7} MB "
                  f"exit {r['exit']}  {what}", file=sys.stderr, flush=True)  # fmt: skip
            for line in r["stderr_tail"]:
                print("    " + line, file=sys.stderr)
    print(json.dumps({str(k): {n: {x: r[x] for x in ("wall_s", "peak_rss_mb", "exit")}
                               for n, r in v.items()} for k, v in report.items()}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
