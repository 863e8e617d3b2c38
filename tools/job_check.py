"""`qtts batch` against `qtts bench --manifest` on the same rows: what writing costs a real job.

    python tools/job_check.py OUT [--rows 2048] [--preset 0.6b] [--work-dir /tmp/qtts-job-check]

Made for the GPU machine (tools/gpu_checks.sh), runs anywhere. Makes one random checkpoint of the
published shapes (examples/make_tiny_checkpoint.py, bf16) and a manifest of real sentences
(tools/job_rows.py), then runs, each in its own process under its own time limit: a warm-up (the
bench on the first --warmup-rows rows, so that what the first process on a machine pays once,
such as Triton's kernel compiles into its on-disk cache, lands on no timed run), the bench on
every row, and `qtts batch` on them three times (WAV files, FLAC files, WebDataset shards), each
into a fresh out dir. Then it checks that every id is there exactly once (results.parquet and the
audio on disk) and prints a table (rows, audio, synthesis time, audio-s/s, job/bench, the job's
writer wait and tail) and a final JSON line. Logs and each run's JSON go to OUT; the checkpoint
and the audio stay in --work-dir (gigabytes). Exit 1 when a run failed, an id is missing or
doubled, or a job fell more than 10% below the bench.

Frame budgets: a random checkpoint's EOS never fires, so where the maker offers --eos-by-text
the checkpoint is made with it (rows end by EOS after about one frame per text token, lengths set
by their text) and job and bench run the automatic frame budget; else every row runs to
--max-new-tokens (default 113 frames, 9 s); so do they when the warm-up's rows ran to their
budget anyway. Either way job and bench get the same budgets, as both set them with the jobs
layer's functions.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
MAKER = REPO / "examples" / "make_tiny_checkpoint.py"
TARGET = 0.9  # a job's audio-s/s over the bench's, at least
ONCE = "each once"  # what check_ids says of an out dir holding every id exactly once
NO_EOS_FRAMES = 113  # without EOS: 112 frames, 8.96 s a row
RUNAWAY = 0.1  # warm-up rows at their budget past this share: EOS by text is not working
# Settings job and bench share. --split none: the tiny tokenizer is byte-level (about 1.3
# characters a token), so a 220-character row is ~170 tokens, over the default
# --max-segment-tokens 50, and would be cut into segments; the real model's BPE gives it ~50
# and keeps it whole, so every row stays whole here too. --on-budget ok: a row that reaches its
# budget is kept, never retried (random weights would retry every row that runs away).
COMMON = ["--split", "none", "--on-budget", "ok"]
# A job logs its progress this often, so a run cut by its time limit still says how far it got
PROGRESS_EVERY_S = "5"
PROGRESS = re.compile(
    r"progress: (\d+)/\d+ rows.*?, ([\d.]+) of about .*?elapsed (\d+):(\d+):(\d+)"
)
JOBS = {  # run name -> the batch options that make it
    "files": [],
    "flac": ["--format", "flac"],
    "webdataset": ["--output", "webdataset"],
}


def make_checkpoint(a, log: Path) -> tuple[Path, bool, float]:
    """(checkpoint, whether rows end by EOS, seconds): reused when --checkpoint names one."""
    if a.checkpoint is not None:
        eos = json.loads((a.checkpoint / "qtts-job-check.json").read_text()).get("eos_by_text")
        return a.checkpoint, bool(eos), 0.0
    ckpt = a.work_dir / f"ckpt-{a.preset}"
    helps = subprocess.run([sys.executable, str(MAKER), "--help"], capture_output=True, text=True)
    eos = "--eos-by-text" in helps.stdout and a.max_new_tokens is None
    cmd = [sys.executable, str(MAKER), str(ckpt), "--size", a.size, "--preset", a.preset]
    # The maker's default is EOS by text; --no-eos-by-text keeps every row at its frame budget.
    plain = ["--no-eos-by-text"] if "--no-eos-by-text" in helps.stdout else []
    cmd += ["--dtype", a.ckpt_dtype, *(["--eos-by-text"] if eos else plain)]
    start = time.perf_counter()
    with log.open("w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=a.ckpt_timeout, check=True)
    (ckpt / "qtts-job-check.json").write_text(json.dumps({"eos_by_text": eos}))
    return ckpt, eos, time.perf_counter() - start


def run(cmd: list[str], log: Path, timeout: float) -> dict:
    """One process: its last stdout line as JSON (None if it has none), exit code, seconds."""
    start = time.perf_counter()
    with log.open("w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, timeout=timeout)
            out, code = p.stdout, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
            code = 124
        f.write(out)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else None
    return {"exit_code": code, "process_s": time.perf_counter() - start, "json": result}


def ids_on_disk(out: Path, name: str) -> Counter:
    """Each id's count among the audio the layout left: files by name, shards by member."""
    if name == "webdataset":
        found: Counter = Counter()
        for shard in sorted((out / "data").glob("*.tar")):
            with tarfile.open(shard) as tar:
                for m in tar.getmembers():
                    if m.name.endswith(".json"):
                        found[json.load(tar.extractfile(m))["id"]] += 1
        return found
    suffix = ".flac" if name == "flac" else ".wav"
    return Counter(p.name[: -len(suffix)] for p in out.iterdir() if p.name.endswith(suffix))


def check_ids(out: Path, name: str, ids: list[str]) -> str | None:
    """Why the out dir does not hold every id exactly once (None: it does)."""
    try:
        results = pq.read_table(out / "results.parquet", columns=["id", "status"]).to_pylist()
    except OSError as e:
        return f"no results.parquet ({e})"
    ok = Counter(r["id"] for r in results if r["status"] == "ok")
    disk = ids_on_disk(out, name)
    want = Counter(ids)
    for what, got in (("results.parquet ok rows", ok), ("audio on disk", disk)):
        if got != want:
            missing, extra = want - got, got - want
            return f"{what}: {len(missing)} id(s) missing, {len(extra)} extra or doubled"
    return None


def last_progress(log: Path) -> dict | None:
    """The last progress line a job logged (rows, audio s, elapsed s, audio-s/s), or None: what
    a run cut by its time limit had done by then (its elapsed includes the model's load)."""
    found = PROGRESS.findall(log.read_text(errors="replace")) if log.exists() else []
    if not found:
        return None
    rows, audio, h, m, sec = found[-1]
    elapsed = int(h) * 3600 + int(m) * 60 + int(sec)
    rate = float(audio) / elapsed if elapsed else None
    return {"rows": int(rows), "audio_s": float(audio), "elapsed_s": elapsed,
            "audio_s_per_s": None if rate is None else round(rate, 3)}  # fmt: skip


def job_row(
    name: str, r: dict, bench_rate: float | None, why: str | None, log: Path | None = None
) -> dict:
    s = r["json"] or {}
    writing = s.get("writing") or {}
    busy = writing.get("busy_s") or {}
    rate = s.get("synthesis_audio_s_per_s")
    return {
        "run": name,
        "exit_code": r["exit_code"],
        "rows_ok": s.get("ok"),
        "audio_s": s.get("audio_s"),
        "load_s": s.get("load_s"),
        "synthesis_s": s.get("synthesis_s"),
        "audio_s_per_s": rate,
        "ratio": round(rate / bench_rate, 3) if rate and bench_rate else None,
        "writer_wait_s": writing.get("wait_s"),
        "writer_drain_s": writing.get("drain_s"),
        "dir_fsync_s": writing.get("dir_fsync_s"),
        "writer_threads": writing.get("threads"),
        "writer_busy_s": busy,
        "hint": writing.get("hint"),
        "wall_s": s.get("wall_s"),
        "process_s": round(r["process_s"], 2),
        "ids": why or ONCE,
        "synthesis": s.get("synthesis"),  # where the synthesizer's time went
        # The whole process's rate, its start-up counted (the issue's figure for a job), and
        # where its time went, from its summary (core/jobs/execution/summary.py)
        "whole_audio_s_per_s": whole_rate(s.get("audio_s"), r["process_s"]),
        "time_split": s.get("time_split"),
        "partial": last_progress(log) if r["exit_code"] == 124 and log else None,
    }


def whole_rate(audio_s: float | None, process_s: float) -> float | None:
    """Audio-s/s over the whole process: imports, load and one-time work counted."""
    return round(audio_s / process_s, 3) if audio_s and process_s > 0 else None


def bench_row(r: dict, name: str) -> dict:
    b = (r["json"] or {}).get("bench_manifest") or {}
    return {
        "run": name,
        "exit_code": r["exit_code"],
        "rows_ok": b.get("ok"),
        "audio_s": round(b["audio_s"], 3) if "audio_s" in b else None,
        "load_s": round(b["load_s"], 3) if "load_s" in b else None,
        "synthesis_s": round(b["synthesis_s"], 3) if "synthesis_s" in b else None,
        "audio_s_per_s": round(b["audio_s_per_s"], 3) if "audio_s_per_s" in b else None,
        "middle_audio_s_per_s": b.get("middle_audio_s_per_s"),
        "first_row_s": b.get("first_row_s"),
        "budgets": b.get("budgets"),
        "hit_frame_budget": b.get("hit_frame_budget"),
        "process_s": round(r["process_s"], 2),
        "synthesis": b.get("synthesis"),  # where the synthesizer's time went
        "synthesis_line": b.get("synthesis_line"),
    }


def runaway(warmup: dict) -> bool:
    """Whether the warm-up's rows ran to their frame budget (EOS by text did not end them) or
    never finished: then the automatic budget (100 + 8 frames a token) would take the timed runs
    past their limits."""
    ok, hit = warmup.get("rows_ok"), warmup.get("hit_frame_budget")
    return not ok or hit > RUNAWAY * ok


def table(rows: list[dict]) -> str:
    def f(v, spec=".1f"):
        return "-" if v is None else format(v, spec)

    lines = [
        f"{'run':11}{'rows ok':>8}{'audio s':>10}{'synth s':>9}{'audio-s/s':>11}{'job/bench':>10}"
        f"{'load s':>8}{'proc s':>8}{'wait s':>8}{'tail s':>8}  busiest writer part / ids"
    ]
    for r in rows:
        busy = r.get("writer_busy_s") or {}
        top = max(busy, key=busy.get) if busy else None
        note = f"{top} {busy[top]:.1f} s; {r.get('ids')}" if top else r.get("ids", "")
        lines.append(
            f"{r['run']:11}{f(r['rows_ok'], 'd'):>8}{f(r['audio_s']):>10}"
            f"{f(r['synthesis_s'], '.2f'):>9}{f(r['audio_s_per_s']):>11}"
            f"{f(r.get('ratio'), '.3f'):>10}{f(r['load_s']):>8}{f(r['process_s']):>8}"
            f"{f(r.get('writer_wait_s'), '.2f'):>8}{f(r.get('writer_drain_s'), '.2f'):>8}  {note}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="logs, each run's JSON and the table ($OUT)")
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--size", default="0.6b", choices=["0.6b", "1.7b"])
    p.add_argument("--preset", default="0.6b", help="the checkpoint maker's --preset")
    p.add_argument("--ckpt-dtype", default="bfloat16", help="the checkpoint's storage dtype")
    p.add_argument("--checkpoint", type=Path, help="reuse one this tool made (skips making it)")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/qtts-job-check"))
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        help=f"every row's budget (unset: automatic with EOS by text, else {NO_EOS_FRAMES})",
    )
    p.add_argument("--runs", default="warmup,bench,files,flac,webdataset")
    p.add_argument("--warmup-rows", type=int, default=256)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    p.add_argument("--ckpt-timeout", type=float, default=150.0)
    a = p.parse_args(argv)
    unknown = set(a.runs.split(",")) - {"warmup", "bench", *JOBS}
    if unknown or a.rows < 1:
        p.error(f"--runs: unknown {sorted(unknown)}" if unknown else "--rows must be >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    from job_rows import describe, make_rows  # tools/, beside this file

    a = parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    a.work_dir.mkdir(parents=True, exist_ok=True)
    ckpt, eos, ckpt_s = make_checkpoint(a, a.out / "job_check_checkpoint.log")
    frames = a.max_new_tokens or (None if eos else NO_EOS_FRAMES)
    budget = ["--max-new-tokens", str(frames)] if frames else []
    print(f"checkpoint {ckpt} ({ckpt_s:.1f} s; rows end by {'EOS' if eos else 'budget'})")
    manifest = a.work_dir / f"rows-{a.rows}.parquet"
    rows = make_rows(a.rows)
    pq.write_table(rows, manifest)
    warmup = a.work_dir / f"rows-{a.rows}-first-{a.warmup_rows}.parquet"
    pq.write_table(rows.slice(0, a.warmup_rows), warmup)
    print(f"manifest {manifest}: {json.dumps(describe(rows))}", flush=True)
    ids = rows["id"].to_pylist()
    qtts = [sys.executable, "-m", "qtts"]
    common = ["--model", str(ckpt), "--device", a.device, "--dtype", a.dtype, *COMMON, *budget]
    results, bench_rate = [], None
    report = {"rows": a.rows, "checkpoint_s": round(ckpt_s, 1), "eos_by_text": eos,
              "max_new_tokens": frames or "auto", "runs": results}  # fmt: skip
    for name in a.runs.split(","):
        log = a.out / f"job_check_{name}.log"
        if name in ("warmup", "bench"):
            rows_of = warmup if name == "warmup" else manifest
            r = run([*qtts, "bench", "--manifest", str(rows_of), *common], log, a.timeout)
            results.append(bench_row(r, name))
            bench_rate = results[-1]["audio_s_per_s"] if name == "bench" else bench_rate
            if name == "warmup" and not frames and runaway(results[-1]):
                frames = NO_EOS_FRAMES  # EOS did not end the rows: bound them as without it
                common += ["--max-new-tokens", str(frames)]
                report["max_new_tokens"] = frames
                print(f"warm-up: rows ran to their budget; --max-new-tokens {frames} from here")
        else:
            out = a.work_dir / f"out-{name}"
            shutil.rmtree(out, ignore_errors=True)
            cmd = [*qtts, "batch", str(manifest), "--out-dir", str(out), *common, *JOBS[name],
                   "--log-interval", PROGRESS_EVERY_S]  # fmt: skip
            r = run(cmd, log, a.timeout)
            results.append(job_row(name, r, bench_rate, check_ids(out, name, ids), log))
        last = results[-1]
        print(
            f"{name}: exit {r['exit_code']} after {r['process_s']:.1f} s, "
            f"{last['audio_s_per_s']} audio-s/s, job/bench {last.get('ratio')}",
            flush=True,
        )
        line = last.get("synthesis_line") or (last["synthesis"] and json.dumps(last["synthesis"]))
        if line:
            print(f"  synthesis: {line}", flush=True)
        if last.get("time_split"):
            print(f"  whole process {last['whole_audio_s_per_s']} audio-s/s; time split: "
                  f"{json.dumps(last['time_split'])}", flush=True)  # fmt: skip
        if last.get("partial"):
            print(f"  cut by its limit; its last progress line: {last['partial']}", flush=True)
        report["runs"] = results  # kept as it grows: a run killed later leaves these
        (a.out / "job_check.json").write_text(json.dumps(report, indent=1))
    print(table(results))
    failed = [r["run"] for r in results if r["exit_code"] or r.get("ids", ONCE) != ONCE]
    slow = [r["run"] for r in results if r.get("ratio") is not None and r["ratio"] < TARGET]
    for r in results:
        if r.get("hint"):
            print(f"{r['run']}: {r['hint']}")
    if slow:
        print(f"below {TARGET:.0%} of the bench: {', '.join(slow)}")
    report.update(failed=failed, below_target=slow)
    (a.out / "job_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({"job_check": report}))
    return 1 if failed or slow else 0


if __name__ == "__main__":
    sys.exit(main())
