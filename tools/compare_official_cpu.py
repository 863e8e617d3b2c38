"""Side by side on CPU: `qtts batch` vs the official qwen-tts on the same job, as whole processes.

Same small random checkpoint (made by examples/make_tiny_checkpoint.py --preset small: hidden 256,
4 talker layers), same 64 requests, batch 16, greedy (random weights never pick EOS, so every row
runs the full fixed length), WAVs written by both. Prints a table and a final JSON line.

    python tools/compare_official_cpu.py --oracle-python /path/to/oracle/venv/bin/python

The oracle venv is the one tools/oracle/setup_venv.sh builds (official package installed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEAKERS = ["vivian", "ryan", "aiden", "serena"]

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


def timed(cmd: list[str], env=None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oracle-python", required=True)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=65)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    import soundfile as sf

    work = Path(tempfile.mkdtemp(prefix="qtts-compare-"))
    ckpt = work / "small"
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_tiny_checkpoint.py"),
                    str(ckpt), "--preset", "small", "--greedy"], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    rows = [{"id": f"r{i:03d}", "text": f"Sentence number {i}: the quick brown fox jumps.",
             "speaker": SPEAKERS[i % 4]} for i in range(args.requests)]  # fmt: skip
    (work / "rows.json").write_text(json.dumps(rows))
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), work / "m.parquet")

    env = {"OMP_NUM_THREADS": str(args.threads), "PATH": "/usr/bin:/bin"}
    qtts_out, official_out = work / "qtts", work / "official"
    official_out.mkdir()
    qtts_cmd = [sys.executable, "-m", "qtts", "batch", str(work / "m.parquet"), "--model",
                str(ckpt), "--greedy", "--device", "cpu", "--dtype", "float32", "--batch-size",
                str(args.batch_size), "--max-new-tokens", str(args.max_new_tokens),
                "--language", "english", "--out-dir", str(qtts_out), "-q"]  # fmt: skip
    script = OFFICIAL_JOB.format(
        oracle_dir=str(ROOT / "tools" / "oracle"), rows=str(work / "rows.json"), ckpt=str(ckpt),
        batch=args.batch_size, tokens=args.max_new_tokens, out=str(official_out),
        threads=args.threads)  # fmt: skip
    (work / "official_job.py").write_text(script)
    t_qtts = timed(qtts_cmd, env=env)
    t_official = timed([args.oracle_python, str(work / "official_job.py")], env=env)

    def audio_seconds(folder: Path) -> float:
        return sum(sf.info(p).duration for p in folder.glob("*.wav"))

    a_qtts, a_official = audio_seconds(qtts_out), audio_seconds(official_out)
    result = {
        "requests": args.requests, "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens, "threads": args.threads,
        "qtts_wall_s": round(t_qtts, 2), "qtts_audio_s": round(a_qtts, 2),
        "qtts_audio_s_per_s": round(a_qtts / t_qtts, 3),
        "official_wall_s": round(t_official, 2), "official_audio_s": round(a_official, 2),
        "official_audio_s_per_s": round(a_official / t_official, 3),
    }  # fmt: skip
    result["speedup"] = round(result["qtts_audio_s_per_s"] / result["official_audio_s_per_s"], 2)
    print(f"{'':10}{'wall s':>10}{'audio s':>10}{'audio-s/s':>12}")
    for name in ("qtts", "official"):
        print(f"{name:10}{result[name + '_wall_s']:>10}{result[name + '_audio_s']:>10}"
              f"{result[name + '_audio_s_per_s']:>12}")  # fmt: skip
    print(f"speedup: {result['speedup']}x")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
