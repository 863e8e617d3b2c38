"""qtts against its peers on one random checkpoint, the same rows and the same card.

The peers: the official code (qwen-tts-hf, batched with a list of texts), faster-qwen3-tts-batch
(its batched CUDA graphs), faster-qwen3-tts (one request at a time, CUDA graphs). Every system
gets the same frame budget per row (random weights never stop: the driver's checkpoints cannot
pick EOS), writes a 16-bit WAV per row, and is timed after its model's load and warmup (qtts's:
a short job on the same loaded model).

    python tools/peers_bench.py all --out $OUT --size 0.6b --rows 128 --frames 128 --budget 235
    python tools/peers_bench.py all --out /tmp/peers --size tiny --device cpu --dtype float32 \\
        --python-tf5 /work/oracle/bin/python --systems qtts,official --rows 20 --frames 20 \\
        --time-limit 150 --time-limits ""    # on a CPU
    python tools/peers_bench.py all --out /tmp/peers --dry-run         # the calls, no model
    python tools/peers_bench.py run --system official --kind base --ckpt DIR --rows ROWS.jsonl \\
        --frames 32 --ref REF.wav --out /tmp/o --device cpu --dtype float32

`all` makes the checkpoints (the published shapes of --size, bf16; Base and CustomVoice), the
reference clip and the rows, installs the carried wheels (bash tools/peers_prepare.sh) into one
folder per environment, prints the schedule, runs each system in its own process under its time
limit (every Base system first: qtts, faster_batch, faster, official; CustomVoice in what is
left of --budget), and writes peers.txt (the table: each run's audio-s/s with and without its
warmup, qtts's too, and qtts's ratio to each) and peers.json into --out.
`run` is one system in this process: one JSON line per batch size. tools/peers/ holds the parts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the peers package beside this file

from peers import checks, driver, run_one  # noqa: E402


def _batches(text: str) -> list[int]:
    return [int(b) for b in text.split(",") if b.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    one = sub.add_parser("run", help="one system in this process; JSON lines on stdout")
    one.add_argument("--system", required=True, choices=run_one.SYSTEMS)
    one.add_argument("--kind", required=True, choices=["base", "custom_voice"])
    one.add_argument("--ckpt", type=Path)
    one.add_argument("--rows", type=Path, help="JSON Lines: id, text, speaker")
    one.add_argument("--limit", type=int, help="the first N rows only")
    one.add_argument(
        "--batch",
        dest="batches",
        type=_batches,
        help="batch sizes, comma-separated (one run each, one load); default: "
        "qtts the memory plan's, faster 1, the others all the rows",
    )
    one.add_argument("--frames", type=int, default=128, help="codec frames per row")
    one.add_argument("--ref", type=Path, help="reference clip (Base)")
    one.add_argument("--out", type=Path, default=Path("/tmp/peers-run"))
    one.add_argument("--device", default="cuda")
    one.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    one.add_argument(
        "--check",
        action="store_true",
        help="no run: bind the calls' signatures; with --ckpt on a CPU, the faster "
        "peers' prompt building (tools/peers/checks.py)",
    )
    one.add_argument(
        "--force-stubs",
        action="store_true",
        help="stand in for librosa, sox and torchaudio even where installed",
    )
    driver.add_arguments(sub.add_parser("all", help="every system in turn, a table at the end"))
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.mode == "run" and args.check:
        checks.main(args)
    elif args.mode == "run":
        if args.ckpt is None or args.rows is None:
            raise SystemExit("error: run needs --ckpt and --rows (or --check)")
        args.out.mkdir(parents=True, exist_ok=True)
        run_one.main(args)
    else:
        driver.main(args)


if __name__ == "__main__":
    main()
