"""Side by side on CPU: `qtts batch` vs the official qwen-tts on the same job, as whole processes.

One random checkpoint in the published layout (examples/make_tiny_checkpoint.py: `--preset 0.6b`
gives the published 0.6B shapes, speech decoder included; `small` a quick one), the same rows,
greedy (made with `--no-eos-by-text`: its EOS never wins, so every row runs to its frame budget),
WAVs written by every run. The official code runs at `--batch-size`; qtts runs once per `--qtts
DTYPE/BATCH` (default: float32 at the official batch, float32 at auto, auto at auto). Prints the
CPU, a table and a final JSON line; each qtts run's WAVs are compared with the official ones (same
lengths; at float32 the same greedy codes give the same audio to 16-bit rounding).

    python tools/compare_official_cpu.py --oracle-python /work/oracle/bin/python \
        --preset 0.6b --requests 16 --frames 32 --batch-size 8

The oracle venv is the one tools/oracle/setup_venv.sh builds (official package installed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEAKERS = ["vivian", "ryan", "aiden", "serena"]
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")

OFFICIAL_JOB = textwrap.dedent("""
    import sys, json, time
    sys.path.insert(0, {oracle_dir!r})
    import oracle_env
    oracle_env.install_torchaudio_stub()  # only the 25 Hz tokenizer imports torchaudio
    import soundfile as sf, torch
    from qwen_tts import Qwen3TTSModel
    torch.set_num_threads({threads})
    rows = json.load(open({rows!r}))
    model = Qwen3TTSModel.from_pretrained({ckpt!r}, dtype=torch.float32)
    for i in range(0, len(rows), {batch}):
        chunk = rows[i:i + {batch}]
        wavs, sr = model.generate_custom_voice(
            text=[r["text"] for r in chunk], speaker=[r["speaker"] for r in chunk],
            language=["English"] * len(chunk), max_new_tokens={tokens},
            do_sample=False, subtalker_dosample=False)
        for r, w in zip(chunk, wavs):
            sf.write({out!r} + "/" + r["id"] + ".wav", w, sr, subtype="PCM_16")
""")


def cpu_summary() -> dict:
    """The CPU's model name and which of the flags that pick a precision it has (lscpu)."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = set(fields.get("Flags", "").split())
    return {
        "model": fields.get("Model name", "?").strip(),
        "cores": os.cpu_count(),
        "flags": [f for f in CPU_FLAGS if f in flags],
    }


def timed(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def read_wavs(folder: Path) -> dict:
    import soundfile as sf

    return {p.stem: sf.read(p, dtype="int16")[0] for p in sorted(folder.glob("*.wav"))}


def against(ours: dict, theirs: dict) -> dict:
    """Same files and lengths as the official run, and the largest sample difference (16-bit)."""
    same_lengths = ours.keys() == theirs.keys() and all(
        len(ours[k]) == len(theirs[k]) for k in ours
    )
    diff = None
    if same_lengths and ours:
        diff = max(int(abs(ours[k].astype(int) - theirs[k].astype(int)).max()) for k in ours)
    return {"same_lengths": same_lengths, "max_abs_diff_int16": diff}


def make_checkpoint(work: Path, preset: str) -> Path:
    ckpt = work / f"ckpt-{preset}"
    size = preset if preset in ("0.6b", "1.7b") else "0.6b"
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_tiny_checkpoint.py"),
                    str(ckpt), "--size", size, "--preset", preset, "--greedy",
                    "--no-eos-by-text"], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return ckpt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oracle-python", required=True)
    ap.add_argument("--preset", default="0.6b", choices=["small", "0.6b", "1.7b"])
    ap.add_argument("--checkpoint", type=Path, help="reuse this checkpoint instead of making one")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--frames", type=int, default=32, help="frames per row (max_new_tokens - 1)")
    ap.add_argument("--batch-size", type=int, default=8, help="the official code's batch")
    runs_help = "a qtts run (repeatable); default float32/B, float32/auto, auto/auto"
    ap.add_argument("--qtts", action="append", metavar="DTYPE/BATCH", help=runs_help)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--work-dir", type=Path)
    args = ap.parse_args()
    runs = args.qtts or [f"float32/{args.batch_size}", "float32/auto", "auto/auto"]

    import pyarrow as pa
    import pyarrow.parquet as pq

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="qtts-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    ckpt = args.checkpoint or make_checkpoint(work, args.preset)
    rows = [{"id": f"r{i:03d}", "text": f"Sentence number {i}: the quick brown fox jumps.",
             "speaker": SPEAKERS[i % 4]} for i in range(args.requests)]  # fmt: skip
    (work / "rows.json").write_text(json.dumps(rows))
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), work / "m.parquet")
    tokens = args.frames + 1  # no EOS: max_new_tokens N gives N - 1 frames, in both

    env = {"OMP_NUM_THREADS": str(args.threads), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    official_out = work / "official"
    official_out.mkdir(exist_ok=True)
    script = OFFICIAL_JOB.format(
        oracle_dir=str(ROOT / "tools" / "oracle"), rows=str(work / "rows.json"), ckpt=str(ckpt),
        batch=args.batch_size, tokens=tokens, out=str(official_out), threads=args.threads,
    )  # fmt: skip
    (work / "official_job.py").write_text(script)
    wall = timed([args.oracle_python, str(work / "official_job.py")], env)
    results = {"official": {"wall_s": wall, "dtype": "float32", "batch": args.batch_size}}
    official_wavs = read_wavs(official_out)
    results["official"]["audio_s"] = sum(len(w) for w in official_wavs.values()) / 24000
    for run in runs:
        dtype, batch = run.split("/")
        out = work / f"qtts-{dtype}-{batch}"
        cmd = [sys.executable, "-m", "qtts", "batch", str(work / "m.parquet"), "--model",
               str(ckpt), "--greedy", "--device", "cpu", "--dtype", dtype, "--batch-size", batch,
               "--max-new-tokens", str(tokens), "--language", "english", "--out-dir", str(out),
               "--overwrite", "-q"]  # fmt: skip
        wall = timed(cmd, env)
        wavs = read_wavs(out)
        results[f"qtts {run}"] = {"wall_s": wall, "dtype": dtype, "batch": batch,
                                  "audio_s": sum(len(w) for w in wavs.values()) / 24000,
                                  **against(wavs, official_wavs)}  # fmt: skip

    base = results["official"]["audio_s"] / results["official"]["wall_s"]
    cpu = cpu_summary()
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores, flags: {' '.join(cpu['flags'])}")
    print(
        f"{args.requests} rows x {args.frames} frames, preset {args.preset}, greedy, WAVs written"
    )
    print(f"{'run':22}{'wall s':>9}{'audio s':>9}{'audio-s/s':>11}{'vs official':>13}")
    for name, r in results.items():
        r["wall_s"] = round(r["wall_s"], 2)
        r["audio_s_per_s"] = round(r["audio_s"] / r["wall_s"], 3)
        r["speedup"] = round(r["audio_s_per_s"] / base, 2)
        print(f"{name:22}{r['wall_s']:>9}{r['audio_s']:>9.2f}{r['audio_s_per_s']:>11}"
              f"{r['speedup']:>12}x")  # fmt: skip
    job = {"preset": args.preset, "requests": args.requests, "frames": args.frames}
    print(json.dumps({"cpu": cpu, **job, "threads": args.threads, "runs": results}))


if __name__ == "__main__":
    main()
