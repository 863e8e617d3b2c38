"""One decode step at a batch's slots, profiled: where its time goes, kernel by kernel.

    python tools/step_profile.py --size 0.6b --slots 256            # on the GPU machine
    python tools/step_profile.py --size small --slots 2 --device cpu --dtype float32

Made for the GPU call of tools/gpu_checks.sh, runs anywhere. Builds the engine a job's pass
builds (random weights of the published shapes, every slot filled by one prefill pass, the KV
view of those prompts), then times the step as a job replays it (its CUDA graph) and eagerly
(the same fused ops, launched one by one), and profiles a few of each. It prints the top kernels
by device time per step (calls per step, microseconds per step, share of the step) and ends with
one JSON line, so the next step toward the roofline (`qtts plan`'s bound) starts from facts: which
kernels, how many, how long. On a CPU the table holds the step's operators instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a source tree without install

import torch  # noqa: E402

from qtts.core.bench.part_clock import ms_per_call, sync  # noqa: E402

TOP = 15  # kernels in the table


def filled_engine(size: str, slots: int, dev: torch.device, dtype: torch.dtype):
    """(engine, graphed step or None, KV view): the bench's engine for `slots` slots, every slot
    prefilled with a bench prompt."""
    from qtts.core.bench.throughput import (
        bench_plan,
        fast_mode,
        mode_tuning,
        random_models,
        synthetic_tokens,
    )
    from qtts.core.engine.step.slots import SlotFill
    from qtts.core.engine.step.views import view_length
    from qtts.core.model.config import SamplingParams
    from qtts.core.synthesis.engine_driver import EngineDriver, EngineShape
    from qtts.core.synthesis.prompt import embed_prompt

    config, model, decoder = random_models(size, dev, dtype)
    mode = fast_mode(dev, dtype)
    plan = bench_plan(config, model, decoder, dev, mode, slots, slots, 128)
    (group,) = plan.groups
    params = SamplingParams(do_sample=True, temperature=0.9, top_k=50, top_p=1.0,
                            repetition_penalty=1.05)  # fmt: skip
    driver = EngineDriver(model, config, dev, mode_tuning(mode, dev, dtype))
    engine_pass = driver.build(EngineShape.of(group), talker=params, subtalker=params)
    engine, step, talker = engine_pass.engine, engine_pass.step, model.talker
    vocab = config.talker.text_vocab_size
    prompts = [embed_prompt(talker, config, synthetic_tokens(i, vocab, 24)) for i in range(slots)]
    s = engine.state
    fills = [SlotFill(slot=i, prompt=p, budget=s.max_frames, seed=i) for i, p in enumerate(prompts)]
    engine.prefill(fills)
    longest = max(p.embeds.shape[0] for p in prompts)
    return engine, step, view_length(longest + 1, engine.tuning.view_bucket, s.kv.max_len)


def kernel_table(fn, dev: torch.device, steps: int) -> tuple[list[dict], int]:
    """The top kernels (CPU: operators) of `steps` calls of fn, per step, and how many kernels a
    step launches in all."""
    from torch.profiler import ProfilerActivity, profile

    cuda = dev.type == "cuda"
    fn()
    sync(dev)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            fn()
        sync(dev)
    rows = []
    for e in prof.key_averages():
        if cuda and getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue  # host-side ops; their kernels are listed on their own
        us = _self_time_us(e, cuda)
        if us > 0:
            rows.append({"name": e.key, "calls": e.count / steps, "us": us / steps})
    total = sum(r["us"] for r in rows) or 1.0
    rows.sort(key=lambda r: -r["us"])
    launches = round(sum(r["calls"] for r in rows))
    return [
        {
            **r,
            "calls": round(r["calls"], 2),
            "us": round(r["us"], 1),
            "share": round(r["us"] / total, 4),
        }
        for r in rows[:TOP]
    ], launches


def _self_time_us(event, cuda: bool) -> float:
    """An event's own time in µs: device time for a kernel (named device_time in recent torch,
    cuda_time before), CPU time for an operator."""
    if not cuda:
        return float(event.self_cpu_time_total)
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def print_table(title: str, rows: list[dict], launches: int, dev: torch.device) -> None:
    what = "kernel launches" if dev.type == "cuda" else "operator calls"
    print(f"{title}: {launches} {what} per step; top {len(rows)} by time per step")
    print(f"{'calls/step':>11} {'µs/step':>9} {'share':>7}  name")
    for r in rows:
        print(f"{r['calls']:>11g} {r['us']:>9.1f} {r['share']:>7.1%}  {r['name'][:90]}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="0.6b")
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10, help="steps timed and profiled, each way")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args(argv)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    with torch.inference_mode():
        engine, step, view = filled_engine(args.size, args.slots, dev, dtype)
        eager = lambda: engine.decode_step(view)  # noqa: E731
        out = {"size": args.size, "slots": args.slots, "view": view, "dtype": args.dtype}
        out["eager_step_ms"] = round(ms_per_call(eager, dev, args.steps), 3)
        if step is not None:
            out["graph_step_ms"] = round(ms_per_call(lambda: step(view), dev, args.steps), 3)
        print(f"{args.size} at {args.slots} slots, KV view {view}: " + ", ".join(
            f"{k} {v}" for k, v in out.items() if k.endswith("_ms")))  # fmt: skip
        top, launches = kernel_table(eager, dev, args.steps)
        print_table("eager step (the fused ops one by one)", top, launches, dev)
        out["eager"] = {"launches_per_step": launches, "top": top}
        if step is not None:
            top, launches = kernel_table(lambda: step(view), dev, args.steps)
            print_table("graph replay (what a job runs)", top, launches, dev)
            out["graph"] = {"launches_per_step": launches, "top": top}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
