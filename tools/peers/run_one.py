"""One system on one checkpoint, in this process: load, warm up, run the rows at each batch size
asked for, print one JSON line per batch size (peers.common.RunResult).

The timed span starts after the load and the system's warmup and ends when the last WAV is
written (CUDA synchronised), so it holds the voice clone prompt, generation, decoding and writing:
what a user's run does once its model is up.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from peers import common
from peers.common import RunResult

SYSTEMS = ("qtts", "official", "faster", "faster_batch")
PACKAGES = {
    "qtts": ("qtts",),
    "official": ("qwen-tts-hf",),
    "faster": ("faster-qwen3-tts",),
    "faster_batch": ("faster-qwen3-tts-batch", "faster-qwen3-tts", "qwen-tts"),
}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _dtype(name: str):
    import torch

    return {"bfloat16": torch.bfloat16, "float32": torch.float32}[name]


def _runner(args, rows):
    if args.system == "official":
        from peers.official import Runner

        return Runner(args.ckpt, args.kind, args.device, _dtype(args.dtype))
    from peers.faster import BatchRunner, SingleRunner

    cls = SingleRunner if args.system == "faster" else BatchRunner
    runner = cls(args.ckpt, args.kind, args.device, _dtype(args.dtype), rows, args.frames)
    if args.system == "faster_batch":
        runner.use_batch(args.batches[0])
    return runner


def run_peer(args, notes: str) -> list[RunResult]:
    rows = common.read_rows(args.rows, args.limit)
    start = time.perf_counter()
    runner = _runner(args, rows)
    load_s = time.perf_counter() - start
    results = []
    for batch in args.batches:
        start = time.perf_counter()
        if args.system == "faster_batch":
            runner.use_batch(batch)  # another size: graphs of its own, captured by its warmup
        runner.warmup(rows, args.ref)
        _sync(args.device)
        warmup_s = time.perf_counter() - start
        out = args.out / f"{args.system}-{args.kind}-b{batch}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        start = time.perf_counter()
        runner.start(args.ref)
        for i in range(0, len(rows), batch):
            runner.run_batch(rows[i : i + batch], args.ref, args.frames, out)
        _sync(args.device)
        wall = time.perf_counter() - start
        results.append(_result(args, rows, batch, out, wall, load_s, warmup_s, notes))
    return results


def run_qtts(args) -> list[RunResult]:
    """A warm-up job on the first rows at few frames, then the rows, one load (qtts_run.py)."""
    from peers import qtts_run

    rows = common.read_rows(args.rows, args.limit)
    rows_file = args.rows
    if args.limit and args.limit < len(common.read_rows(args.rows)):
        rows_file = common.write_rows(rows, args.out / f"rows-{len(rows)}.jsonl")
    batch = str(args.batches[0]) if args.batches else "auto"
    out = args.out / f"qtts-{args.kind}-b{batch}"
    warm_rows, warm_frames = qtts_run.warmup_shape(len(rows), args.frames)
    warm_file = common.write_rows(rows[:warm_rows], args.out / "qtts-warmup-rows.jsonl")
    warm_ref = None
    if args.ref is not None:  # another path: the real job builds its own reference prompt
        warm_ref = args.out / "qtts-warmup-ref.wav"
        shutil.copyfile(args.ref, warm_ref)
    warm_out = args.out / f"qtts-{args.kind}-warmup"
    timed = qtts_run.warm_then_run(
        qtts_run.command(
            warm_file, args.ckpt, args.kind, warm_ref, warm_frames, warm_out, args.device, batch
        ),
        qtts_run.command(
            rows_file, args.ckpt, args.kind, args.ref, args.frames, out, args.device, batch
        ),
    )
    note = (
        f"warmup: a {warm_rows}-row x {warm_frames}-frame qtts batch job on the loaded model "
        "(speech decoder graphs, Triton kernels); wall: the real job from load_synthesizer's "
        "return to its end (its decode-step graph captures included, one set per engine pass)"
    )
    summary = timed["summary"]
    if summary.get("synthesis_s") is not None:
        note += f"; qtts's own synthesis_s {summary['synthesis_s']}"
    if timed["warmup_summary"].get("synthesis_s") is not None:
        note += f" (warm-up job's {timed['warmup_summary']['synthesis_s']})"
    return [
        _result(args, rows, batch, out, timed["wall_s"], timed["load_s"], timed["warmup_s"], note)
    ]


def _result(args, rows, batch, out: Path, wall, load_s, warmup_s, notes) -> RunResult:
    made, per_row, audio_s = common.collect(out, rows, args.frames)
    if per_row != [args.frames, args.frames]:
        notes = f"{notes}; FRAMES DIFFER from the budget {args.frames}: {per_row}".lstrip("; ")
    return RunResult(
        system=args.system,
        kind=args.kind,
        rows=len(rows),
        batch=batch,
        frames_budget=args.frames,
        frames_made=made,
        frames_per_row=per_row,
        audio_s=audio_s,
        wall_s=wall,
        load_s=load_s,
        warmup_s=warmup_s,
        device=common.device_name(args.device),
        dtype=args.dtype,
        versions=common.versions(*PACKAGES[args.system]),
        notes=notes,
    )


def main(args) -> None:
    if args.batches is None and args.system != "qtts":
        args.batches = (
            [1] if args.system == "faster" else [len(common.read_rows(args.rows, args.limit))]
        )
    if args.system == "qtts":
        results = run_qtts(args)
    else:
        from peers import stubs

        stood_in = stubs.install(force=args.force_stubs)
        notes = f"stand-ins: {', '.join(stood_in)}" if stood_in else ""
        results = run_peer(args, notes)
    for result in results:
        print(result.line(), flush=True)
