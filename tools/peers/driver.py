"""`peers_bench.py all`: the checkpoints, the clip and the rows, then every system in its own
process and environment under a time limit, then the table.

Environments: qtts runs on the image's packages (this process's Python and PYTHONPATH); the
official code and faster-qwen3-tts on transformers 5.15.1 ("tf5"), faster-qwen3-tts-batch on
transformers 4.57.3 ("tf4"), each from the wheels tools/peers_prepare.sh put in .whl/peers/,
installed here into a folder that goes first on that process's PYTHONPATH (--python-tf5 and
--python-tf4 name a ready interpreter instead, e.g. the oracle venv on a CPU). Checkpoints and WAVs
go to --work (gigabytes at the published shapes); only the table, JSON and logs go to --out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from peers import common, report
from peers.qtts_run import warmup_shape

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "tools" / "peers_bench.py"
ENVIRONMENT = {"qtts": "image", "official": "tf5", "faster": "tf5", "faster_batch": "tf4"}
# (system, kind) in the order they run: every Base system first (qtts, then the peers, the
# official code last: its figure on this checkpoint is known from earlier runs), CustomVoice
# after them, only in the time the Base runs leave.
PLAN = [
    ("qtts", "base"),
    ("faster_batch", "base"),
    ("faster", "base"),
    ("official", "base"),
    ("qtts", "custom_voice"),
    ("official", "custom_voice"),
]
# Each system's time limit (seconds, its whole process: imports, load, warmup, the timed rows),
# sized for the default command (0.6b, 128 rows x 128 frames, bf16; 3 rows for faster-qwen3-tts)
# on an H200, with --budget 235 (setup, a 0.6b checkpoint: 23 s). Measured there: qtts's cold
# command 52 s in all (imports and load 12, its wall 40; the warm-up job adds a few seconds of
# its own work), the official code 49 (imports and load 15, its 3-token warmup call 3.5, 128 rows
# 28). The faster peers load through the official code (~15 s); their graph captures and rows
# are estimates. With --budget, time a run leaves goes to the runs after it.
LIMITS = "qtts=65,faster_batch=50,faster=40,official=55"
MIN_RUN_S = 20  # no run starts with less left than this
SIZES = {
    "0.6b": ("0b6", "0.6b"),
    "1.7b": ("1b7", "1.7b"),
    "tiny": ("1b7", "tiny"),
    "small": ("1b7", "small"),
}  # --size -> (make_tiny_checkpoint size, preset)


def add_arguments(ap) -> None:
    ap.add_argument("--out", type=Path, required=True, help="table, JSON and logs")
    ap.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/peers-work"),
        help="checkpoints, environments and WAVs (large)",
    )
    ap.add_argument("--size", default="0.6b", choices=sorted(SIZES))
    ap.add_argument("--rows", type=int, default=128, help="rows of qtts and faster-qwen3-tts-batch")
    ap.add_argument("--official-rows", type=int, help="default --rows: one batch of them")
    ap.add_argument(
        "--single-rows",
        type=int,
        default=3,
        help="rows of faster-qwen3-tts (batch 1: its rate does not depend on them)",
    )
    ap.add_argument(
        "--batch-sizes",
        type=str,
        help="faster-qwen3-tts-batch's sizes, e.g. 32,128 (one warmup and run each; "
        "default: all its rows in one batch, as qtts and the official code run them)",
    )
    ap.add_argument("--frames", type=int, default=128, help="codec frames per row, every system")
    ap.add_argument(
        "--time-limits",
        default=LIMITS,
        help=f"seconds per system's run, its process in all (default {LIMITS}); "
        "a system not named gets --time-limit",
    )
    ap.add_argument(
        "--time-limit",
        type=float,
        default=120,
        help="seconds of a run whose system --time-limits does not name",
    )
    ap.add_argument(
        "--budget",
        type=float,
        help="seconds for the whole driver, setup included: each Base run keeps the time "
        "limits of the Base runs after it in reserve and may use what is left beyond them; a "
        "CustomVoice run (and its checkpoint) only where its whole limit is left; none starts "
        f"with under {MIN_RUN_S} s",
    )
    ap.add_argument("--systems", default="qtts,official,faster_batch,faster")
    ap.add_argument("--kinds", default="base,custom_voice")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--wheels", type=Path, default=ROOT / ".whl" / "peers")
    ap.add_argument("--python-tf5", help="an interpreter with qwen-tts-hf etc. (skip the wheels)")
    ap.add_argument("--python-tf4", help="an interpreter with faster-qwen3-tts-batch's stack")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="the calls and commands, each peer's signatures checked; no model",
    )


def plan(args) -> list[tuple[str, str]]:
    systems, kinds = args.systems.split(","), args.kinds.split(",")
    return [(s, k) for s, k in PLAN if s in systems and k in kinds]


def batches(args, system: str) -> tuple[int, list[int]]:
    """(rows, batch sizes) of a system's run."""
    if system == "faster":
        return min(args.single_rows, args.rows), [1]
    if system == "official":
        rows = args.official_rows or args.rows
        return rows, [rows]
    if system == "faster_batch":
        sizes = args.batch_sizes or str(args.rows)
        return args.rows, sorted({int(b) for b in sizes.split(",")})
    return args.rows, []  # qtts: the memory plan's batch


def limits(args) -> dict[str, float]:
    """System -> its run's time limit: --time-limits, else --time-limit."""
    out = {}
    for item in filter(None, (i.strip() for i in args.time_limits.split(","))):
        name, sep, seconds = item.partition("=")
        if not sep or name.strip() not in ENVIRONMENT:
            raise SystemExit(f"error: --time-limits wants SYSTEM=SECONDS, not {item!r}")
        out[name.strip()] = float(seconds)
    return {system: out.get(system, args.time_limit) for system in ENVIRONMENT}


def reserve(todo: list[tuple[str, str]], index: int, limit: dict[str, float]) -> float:
    """Seconds kept back for the Base runs after todo[index] (CustomVoice runs keep none)."""
    return sum(limit[s] for s, k in todo[index + 1 :] if k == "base")


def schedule(args, todo: list[tuple[str, str]]) -> list[str]:
    """The planned runs in order, each with its rows, batch and time limit (printed first)."""
    limit = limits(args)
    lines = []
    for system, kind in todo:
        count, sizes = batches(args, system)
        if system == "qtts":
            warm_rows, warm_frames = warmup_shape(count, args.frames)
            rows = f"a {warm_rows}-row x {warm_frames}-frame warm-up job, then {count} rows, "
            rows += "batch auto"
        else:
            rows = f"{count} rows, batch {','.join(map(str, sizes))}"
        extra = "" if kind == "base" else " (only in what the Base runs leave)"
        lines.append(f"  {system} {kind}: {rows}, limit {limit[system]:.0f} s{extra}")
    base = sum(limit[s] for s, k in todo if k == "base")
    total = f"Base runs {base:.0f} s of limits"
    if args.budget:
        total += f" in the {args.budget:.0f} s budget, setup (checkpoint, environments) first "
        total += f"in the {args.budget - base:.0f} s beside them"
        if base >= args.budget:
            total += " (DOES NOT FIT: the last Base runs get less than their limits)"
    return ["schedule:", *lines, f"  {total}; a run that ends early leaves its time to the next"]


def environment(name: str, args) -> tuple[str, list[str]]:
    """(python, PYTHONPATH entries to put first) of an environment; ValueError if unavailable."""
    if name == "image":
        return sys.executable, []
    python = getattr(args, f"python_{name}")
    if python:
        return python, []
    wheels = sorted((args.wheels / name).glob("*.whl")) + sorted(
        (args.wheels / "both").glob("*.whl")
    )
    if not wheels:
        raise ValueError(f"no wheels in {args.wheels / name}: run bash tools/peers_prepare.sh")
    target = args.work / f"site-{name}"
    done = target / ".installed"
    names = "\n".join(w.name for w in wheels)
    if not done.is_file() or done.read_text() != names:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--upgrade",
            "--target",
            str(target),
            *map(str, wheels),
        ]
        subprocess.run(cmd, check=True)
        done.write_text(names)
    return sys.executable, [str(target)]


def make_checkpoints(args, kinds: set[str]) -> dict[str, Path]:
    """One random checkpoint per kind (bf16 talker at the published shapes, the same seed), made
    once per --work; the EOS row of codec_head zeroed so no system can stop a row early."""
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    size, preset = SIZES[args.size]
    dtype = "bfloat16" if preset in ("0.6b", "1.7b") else "float32"
    out = {}
    for kind in sorted(kinds):
        ckpt = args.work / f"ckpt-{args.size}-{kind}"
        stamp = ckpt / ".peers-made"
        key = json.dumps({"size": size, "preset": preset, "dtype": dtype, "kind": kind})
        if not stamp.is_file() or stamp.read_text() != key:
            start = time.perf_counter()
            make_tiny_checkpoint(ckpt, model_type=kind, size=size, preset=preset, dtype=dtype)
            never_stop(ckpt)
            stamp.write_text(key)
            print(f"checkpoint {ckpt.name}: {time.perf_counter() - start:.1f} s", flush=True)
        out[kind] = ckpt
    return out


def never_stop(ckpt: Path) -> None:
    """Zero the EOS row of codec_head: its logit is then 0 at every step, below the top-k cut
    (and the argmax) of the ~2,000 random audio logits around it, so no sampler picks it."""
    from safetensors.torch import load_file, save_file

    eos = json.loads((ckpt / "config.json").read_text())["talker_config"]["codec_eos_token_id"]
    path = ckpt / "model.safetensors"
    tensors = load_file(path)
    tensors["talker.codec_head.weight"][eos] = 0
    save_file(tensors, path, metadata={"format": "pt"})


def run_command(args, system: str, kind: str, ckpt: Path, rows: Path, ref: Path) -> list[str]:
    count, sizes = batches(args, system)
    cmd = [
        "run",
        "--system",
        system,
        "--kind",
        kind,
        "--ckpt",
        str(ckpt),
        "--rows",
        str(rows),
        "--limit",
        str(count),
        "--frames",
        str(args.frames),
        "--ref",
        str(ref),
        "--out",
        str(args.work / "wavs"),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
    ]
    return cmd + (["--batch", ",".join(map(str, sizes))] if sizes else [])


def run_system(
    args, system: str, kind: str, cmd: list[str], log: Path, limit: float | None = None
) -> list[dict]:
    """Run one system's process under the time limit; its JSON lines, or one line saying why
    there are none (the process group is killed when the limit passes)."""
    limit = args.time_limit if limit is None else limit
    try:
        python, first = environment(ENVIRONMENT[system], args)
    except (ValueError, subprocess.CalledProcessError) as e:
        return [{"system": system, "kind": kind, "error": f"environment: {e}"}]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([*first, env.get("PYTHONPATH", "")]).strip(os.pathsep)
    start = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [python, str(ENTRY), *cmd],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            return [
                {
                    "system": system,
                    "kind": kind,
                    "error": f"timeout after {limit:.0f} s",
                    **_partial(stdout),
                }
            ]
    took = round(time.perf_counter() - start, 1)
    lines = result_lines(stdout)
    if proc.returncode or not lines:
        tail = log.read_text(errors="replace")[-600:]
        return [
            *lines,
            {
                "system": system,
                "kind": kind,
                "process_s": took,
                "error": f"exit {proc.returncode}: {tail}",
            },
        ]
    return [dict(line, process_s=took) for line in lines]


def result_lines(stdout: str | None) -> list[dict]:
    """The JSON objects with a "system" key among a run's stdout lines (peers print too)."""
    out = []
    for text in (stdout or "").splitlines():
        try:
            line = json.loads(text) if text.startswith("{") else None
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict) and "system" in line:
            out.append(line)
    return out


def _partial(stdout: str | None) -> dict:
    lines = result_lines(stdout)
    return {"finished_batches": lines} if lines else {}


def prepare_environments(args, todo: list[tuple[str, str]]) -> None:
    """Each run's environment installed now, as setup (a failure shows in its run's line)."""
    for name in dict.fromkeys(ENVIRONMENT[s] for s, _ in todo):
        try:
            environment(name, args)
        except (ValueError, subprocess.CalledProcessError):
            pass


def run_limit(args, todo, index: int, limit: dict[str, float], left: float | None) -> float:
    """The time limit of todo[index]: with --budget, a Base run may use what is left beyond the
    later Base runs' limits, a CustomVoice run gets its limit if that much is left (else 0: it
    does not run); without, its limit."""
    system, kind = todo[index]
    if left is None:
        return limit[system]
    if kind == "base":
        return left - reserve(todo, index, limit)
    return limit[system] if left >= limit[system] else 0.0


def not_run(system: str, kind: str, left: float | None) -> dict:
    why = "its time limit is under" if left is None else f"{left:.0f} s left of --budget, under"
    return {"system": system, "kind": kind, "error": f"not run: {why} what it needs"}


def main(args) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    (args.out / "logs").mkdir(exist_ok=True)
    todo = plan(args)
    print("\n".join(schedule(args, todo)), flush=True)
    if args.dry_run:
        report.dry_run(args, todo, run_command, batches)
        for system in dict.fromkeys(s for s, _ in todo):  # each peer's calls bound, no model
            log = args.out / "logs" / f"{system}-check.log"
            cmd = ["run", "--system", system, "--kind", "base", "--check"]
            for line in run_system(args, system, "base", cmd, log):
                print(json.dumps(line), flush=True)
        return
    began = time.perf_counter()
    limit = limits(args)
    # Setup: the Base checkpoint, the environments, the rows and the clip. A CustomVoice
    # checkpoint is made only when its first run is due and the time left holds it and the run.
    ckpts = make_checkpoints(args, {k for _, k in todo if k == "base"})
    ckpt_s = time.perf_counter() - began
    prepare_environments(args, todo)
    rows = common.write_rows(common.make_rows(args.rows), args.work / "rows.jsonl")
    ref = common.write_reference(args.work / "ref.wav")
    print(f"setup: {time.perf_counter() - began:.1f} s", flush=True)
    results = []
    for index, (system, kind) in enumerate(todo):
        left = args.budget - (time.perf_counter() - began) if args.budget else None
        if kind not in ckpts:  # a CustomVoice checkpoint: made if it and the run fit
            if left is not None and left < ckpt_s + limit[system]:
                results.append(not_run(system, kind, left))
                continue
            ckpts.update(make_checkpoints(args, {kind}))
            left = args.budget - (time.perf_counter() - began) if args.budget else None
        seconds = run_limit(args, todo, index, limit, left)
        if seconds < MIN_RUN_S:
            results.append(not_run(system, kind, left))
            continue
        cmd = run_command(args, system, kind, ckpts[kind], rows, ref)
        log = args.out / "logs" / f"{system}-{kind}.log"
        print(f"== {system} {kind} (limit {seconds:.0f} s): {' '.join(cmd)}", flush=True)
        for line in run_system(args, system, kind, cmd, log, seconds):
            print(json.dumps(line), flush=True)
            results.append(line)
    setup = {
        "size": args.size,
        "frames": args.frames,
        "rows": args.rows,
        "device": args.device,
        "dtype": args.dtype,
        "total_s": round(time.perf_counter() - began, 1),
        "qtts_warmup": "{}-row x {}-frame".format(*warmup_shape(args.rows, args.frames)),
    }
    report.write(args.out, results, setup)
