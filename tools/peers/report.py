"""The driver's output: the table of every run (audio-s/s and qtts's ratio to it), peers.txt and
peers.json in --out, and the dry run's listing of calls and commands."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from peers import faster, official, qtts_run

COLUMNS = (
    "system",
    "kind",
    "rows",
    "batch",
    "frames/row",
    "audio s",
    "warmup s",
    "wall s",
    "audio-s/s with warmup",
    "qtts x",
    "audio-s/s after warmup",
    "qtts x",
    "load s",
)
# What each figure holds, for the table's header.
LEGEND = (
    "load s: the model's load (left out of both rates). "
    "warmup s: untimed work on the loaded model before the rows: qtts a {qtts_warmup} qtts batch "
    "job (the speech decoder's CUDA graphs, Triton kernels), the official code one 3-token call, "
    "faster-qwen3-tts(-batch) warmup() (their CUDA graph captures). "
    "wall s: after it: the voice clone prompt, generation, decoding, a WAV per row (qtts: also "
    "each engine pass's decode-step graph capture, its records and results.parquet). "
    "audio-s/s with warmup = audio s / (warmup s + wall s); after warmup = audio s / wall s; "
    "qtts x = qtts's rate on the same kind / the row's (rates: a system run on fewer rows "
    "compares like for like)"
)


def qtts_rate(results: list[dict], kind: str, key: str) -> float | None:
    rates = [
        r[key]
        for r in results
        if r.get("system") == "qtts" and r.get("kind") == kind and "error" not in r
    ]
    return max(rates) if rates else None


def _ratio(ours: float | None, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if ours and theirs else "-"


def table(results: list[dict]) -> list[str]:
    """One line per run; a failed or timed-out run says so in place of its figures. "with warmup"
    counts each system's warmup in, "after warmup" leaves it out; each "qtts x" is qtts's rate
    on the same kind over the row's."""
    lines = [" | ".join(COLUMNS), " | ".join("---" for _ in COLUMNS)]
    for r in results:
        if "error" in r:
            lines.append(f"{r['system']} | {r['kind']} | failed: {r['error'][:200]!r}")
            continue
        rate, after = r["audio_s_per_s"], r["after_warmup_audio_s_per_s"]
        low, high = r["frames_per_row"]
        cells = (
            r["system"],
            r["kind"],
            r["rows"],
            r["batch"],
            str(low) if low == high else f"{low}-{high}",
            f"{r['audio_s']:.1f}",
            f"{r['warmup_s']:.1f}",
            f"{r['wall_s']:.2f}",
            f"{rate:.2f}",
            _ratio(qtts_rate(results, r["kind"], "audio_s_per_s"), rate),
            f"{after:.2f}",
            _ratio(qtts_rate(results, r["kind"], "after_warmup_audio_s_per_s"), after),
            f"{r['load_s']:.1f}",
        )
        lines.append(" | ".join(map(str, cells)))
    return lines


def write(out: Path, results: list[dict], setup: dict) -> None:
    device = next((r["device"] for r in results if "device" in r), setup["device"])
    head = (
        f"{device}; {setup['size']} shapes, {setup['dtype']}; {setup['frames']} frames per "
        f"row for every system (EOS cannot win); whole driver {setup['total_s']} s"
    )
    warm = setup.get("qtts_warmup", "short")
    text = "\n".join([head, LEGEND.format(qtts_warmup=warm), *table(results)]) + "\n"
    (out / "peers.txt").write_text(text)
    (out / "peers.json").write_text(json.dumps({"setup": setup, "runs": results}, indent=1))
    print(text, flush=True)
    print(json.dumps({"setup": setup, "runs": results}), flush=True)


def dry_run(args, todo, run_command, batches) -> None:
    """Each run's calls (as its module spells them) and its exact command line; no model."""
    from peers import common
    from peers.driver import ENTRY, ENVIRONMENT

    rows = common.make_rows(args.rows)
    seq_len = common.seq_len_bound(rows, args.frames)
    ckpt, rows_file, ref = Path("CKPT"), args.work / "rows.jsonl", args.work / "ref.wav"
    for system, kind in todo:
        count, sizes = batches(args, system)
        batch = sizes[-1] if sizes else "auto"
        if system == "official":
            calls = official.calls(kind, batch, args.frames)
        elif system == "qtts":
            warm_rows, warm_frames = qtts_run.warmup_shape(count, args.frames)
            warm = qtts_run.command(
                Path(f"WARMUP_ROWS({warm_rows})"),
                ckpt,
                kind,
                Path("COPY_OF_REF") if kind == "base" else None,
                warm_frames,
                Path("WARMUP_OUT"),
                args.device,
            )
            real = qtts_run.command(
                rows_file, ckpt, kind, ref, args.frames, args.work / "wavs", args.device
            )
            calls = [
                f"warm-up (untimed): qtts {shlex.join(warm)}",
                f"then, the same loaded model: qtts {shlex.join(real)}",
            ]
        else:
            calls = faster.calls(system, kind, batch, args.frames, seq_len)
        cmd = run_command(args, system, kind, ckpt, rows_file, ref)
        print(
            f"== {system} {kind} ({ENVIRONMENT[system]} environment): {count} rows, "
            f"batch {sizes or 'auto'}",
            file=sys.stdout,
        )
        for call in calls:
            print(f"   {call}")
        print(f"   $ python {ENTRY.name} {shlex.join(cmd)}")
