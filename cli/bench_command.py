"""`qtts bench`: parse options, run qtts.core.bench per batch size, print a table + JSON line;
with --manifest, a job's rows through a job's synthesis path instead (qtts.cli.bench_manifest)."""

from __future__ import annotations

import json
import platform
from typing import Annotated

import typer

from qtts.cli import options as o
from qtts.cli.errors import cli_errors
from qtts.cli.logs import setup_logging
from qtts.core.jobs.choices import Split

# On a CPU both step figures time the same work; sets of steps this far apart were disturbed.
LOAD_GAP = 1.5


def _parse_sizes(text: str) -> list[int | None]:
    """A comma list of slot counts; "auto" (None) is the memory plan's choice."""
    try:
        sizes = [None if x.strip() == "auto" else int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"--batch-sizes {text!r}: use a list like 1,16,64,auto") from None
    if not sizes or min((s for s in sizes if s is not None), default=1) < 1:
        raise typer.BadParameter("--batch-sizes: give positive integers or auto")
    return sizes


def bench(
    size: Annotated[str, typer.Option(help="Model dimensions: 0.6b, 1.7b or small.")] = "0.6b",
    batch_sizes: Annotated[
        str | None,
        typer.Option(
            help="Comma list of slot counts; auto = the memory plan's choice. Unset: 1,16 "
            "(with --manifest: auto; one value there, as a job's --batch-size).",
            show_default=False,
        ),
    ] = None,
    frames: Annotated[
        int, typer.Option(min=2, help="Frames per request (fixed: EOS ignored).")
    ] = 128,
    requests: Annotated[
        int | None,
        typer.Option(min=1, help="Requests per batch size. Unset: --passes x batch size."),
    ] = None,
    passes: Annotated[
        int,
        typer.Option(
            min=1,
            help="Passes of a full batch each, when --requests is unset. The steady-state "
            "figure leaves out the first pass's fill; 8 or more keep the first fill and the "
            "last tail from dominating the whole-run figure.",
        ),
    ] = 2,
    device: o.Device = "auto",
    dtype: o.DtypeOpt = o.Dtype.auto,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Also run the eager module path (no CUDA graphs, no packed CPU weights); "
            "print fast/eager ratios.",
        ),
    ] = False,
    write: Annotated[bool, typer.Option(help="Encode each utterance as WAV (timed).")] = True,
    vocoder: Annotated[
        bool,
        typer.Option(
            help="Run the vocoder beside the decode loop, as a job does. --no-vocoder: decode "
            "only, to see what the vocoder costs the loop (no audio, no writing).",
        ),
    ] = True,
    manifest: Annotated[
        str | None,
        typer.Option(
            metavar="FILE",
            help="Time a job's rows instead: every row of this manifest through the synthesis "
            "path `qtts batch` runs (validation, budgets, length order, memory plan, engine, "
            "vocoder), writing nothing, on the checkpoint --model names. --size, --frames, "
            "--requests, --passes, --compare, --write and --vocoder do not apply.",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="With --manifest: the checkpoint.")
    ] = None,
    max_new_tokens: o.MaxNewTokens = None,
    split: o.SplitOpt = Split.auto,
    max_segment_tokens: o.MaxSegmentTokens = None,
    on_budget: o.OnBudgetOpt = None,
    speaker: o.Speaker = None,
    count_launches: Annotated[
        bool,
        typer.Option(
            "--count-launches",
            help="Instead of timing: count the kernel launches of one sampled decode step and of "
            "one padded prefill pass on the path the GPU runs (meta device: no GPU, no memory), "
            "split by phase.",
        ),
    ] = False,
) -> None:
    """Throughput on random weights of the real model sizes (no download): audio-s/s, frames/s,
    RTF, per-phase time, ms per decode step, peak memory (GPU, or RSS on CPU). The last stdout
    line is JSON."""
    setup_logging(quiet=False, verbose=False)
    if manifest is not None:
        from qtts.cli.bench_manifest import run_manifest_bench

        if count_launches or compare:
            raise typer.BadParameter("--manifest: no --compare or --count-launches")
        return run_manifest_bench(
            manifest,
            model=model,
            device=device,
            dtype=dtype,
            batch_size=batch_sizes or "auto",
            max_new_tokens=max_new_tokens,
            split=split,
            max_segment_tokens=max_segment_tokens,
            on_budget=on_budget,
            speaker=speaker,
            machine=_machine(device),
        )
    sizes = _parse_sizes(batch_sizes or "1,16")
    if size not in ("0.6b", "1.7b", "small"):
        raise typer.BadParameter(f"--size {size!r}: use 0.6b, 1.7b or small")
    if count_launches:
        if None in sizes:
            raise typer.BadParameter("--count-launches: give batch sizes as numbers, not auto")
        with cli_errors():
            rows = _count(size, sizes)
        typer.echo(json.dumps({"launches": rows}))
        return
    with cli_errors():
        rows = _run(
            size,
            sizes,
            frames=frames,
            requests=requests,
            passes=passes,
            device=device,
            dtype=dtype.value,
            compare=compare,
            write=write,
            vocoder=vocoder,
        )
    typer.echo(json.dumps({"bench": rows, "machine": _machine(device)}))


def _count(size: str, sizes: list[int]) -> list[dict]:
    """Launches per decode step per batch size, and per layer pass of the prefill pass that
    refills that batch (up to the GPU's prefill group), on the GPU's path and on its module-path
    twin."""
    from dataclasses import replace

    from qtts.core.bench.launches import (
        PHASES,
        count_decode_step,
        launches_per_step,
        meta_engine,
        prefill_launches,
    )
    from qtts.core.engine.settings import EngineSettings

    gpu = EngineSettings.for_device("cuda", env={})
    twin = replace(gpu, cuda_graphs=False, layer_path="module")
    rows = []
    typer.echo(
        f"{'batch':>6} {'launches':>9} "
        + " ".join(f"{p:>17}" for p in PHASES)
        + f" {'module path':>12} {'prefill/layer':>14} {'module path':>12}"
    )
    for batch in sizes:
        row = {"size": size, "batch": batch, **launches_per_step(size, batch)}
        row["module_path_launches"] = count_decode_step(meta_engine(size, batch, twin)).total
        prompts = min(batch, gpu.prefill_group)
        row.update(prefill_launches(size, prompts))
        module = prefill_launches(size, prompts, twin)["prefill_launches_per_layer_pass"]
        row["module_path_prefill_launches_per_layer_pass"] = module
        rows.append(row)
        typer.echo(
            f"{batch:>6} {row['launches_per_step']:>9} "
            + " ".join(f"{row['phases'][p]:>17}" for p in PHASES)
            + f" {row['module_path_launches']:>12}"
            + f" {row['prefill_launches_per_layer_pass']:>14} {module:>12}"
        )
    return rows


def _run(
    size, sizes, frames, requests, passes, device, dtype, compare, write, vocoder
) -> list[dict]:
    import torch

    from qtts.core.bench.machine import measure
    from qtts.core.bench.throughput import (
        bench_plan,
        fast_mode,
        random_models,
        roofline_fraction,
        run_one,
    )
    from qtts.core.engine.cpu_runtime import (
        apply_cpu_budget,
        cpu_budget,
        describe_cpu_budget,
        set_threads,
    )
    from qtts.core.model.loader import parse_device, parse_dtype, use_device
    from qtts.core.synthesis.memory_plan import MemoryPlanError

    dev = parse_device(device)
    use_device(dev)
    dt = parse_dtype(dtype, dev)
    budget = None
    if dev.type == "cpu":  # the job's thread budget, set before anything is measured
        budget = cpu_budget()
        set_threads(budget.threads)
    config, model, decoder = random_models(size, dev, dt)
    if budget is not None:  # the allocator as a job sets it, once its weights are in place
        kept = apply_cpu_budget(budget.threads, budget.vocoder_thread)
        typer.echo(f"cpu: {describe_cpu_budget(kept=kept)}; dtype {str(dt).removeprefix('torch.')}")
    spec = measure(dev, dt)  # the roofline's device: this machine, measured
    typer.echo(f"roofline device: {spec.name}")
    fast = fast_mode(dev, dt)
    modes = [fast] + (["eager"] if compare and fast != "module" else [])  # module: eager already
    rows = []
    typer.echo(
        f"{'size':6}{'batch':>6}{'mode':>7}{'audio-s/s':>11}{'frames/s':>10}{'RTF':>8}"
        f"{'step ms':>9}{'peak GiB':>9}{'roofline':>10}"
    )
    for b in sizes:
        by_mode = {}
        for mode in modes:
            try:
                plan = bench_plan(
                    config,
                    model,
                    decoder,
                    device=dev,
                    mode=mode,
                    batch=b,
                    rows=requests or 256,
                    frames=frames,
                )
                n = requests or passes * plan.slots
                r = run_one(
                    size,
                    config,
                    model,
                    decoder,
                    plan=plan,
                    requests=n,
                    frames=frames,
                    device=dev,
                    mode=mode,
                    write=write and vocoder,
                    vocoder_on=vocoder,
                )
            except MemoryPlanError as e:
                typer.echo(f"{size:6}{b:>6}  {e}")
                break
            except torch.OutOfMemoryError:
                typer.echo(f"{size:6}{b or 'auto':>6}  out of GPU memory")
                torch.cuda.empty_cache()
                break
            r.roofline = roofline_fraction(r, config, dt.itemsize, spec)
            step = r.step_ms.get("graph_step", r.step_ms["step"])
            label = f"{r.batch}{'*' if r.auto else ''}"
            typer.echo(
                f"{size:6}{label:>6}{r.mode:>7}{r.audio_s_per_s:>11.2f}"
                f"{r.frames_per_s:>10.1f}{r.rtf:>8.4f}{step:>9.2f}{r.peak_mem_gb or 0:>9.2f}"
                f"{r.roofline['fraction']:>10.1%}"
            )
            typer.echo(
                "      phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in r.phases_s.items())
            )
            typer.echo(f"      {_steady_line(r)}")
            typer.echo(
                f"      decode loop: {r.steps} steps, {r.loop_ms_per_step:.2f} ms per step "
                f"(prefill and an inline vocoder out{'' if vocoder else '; no vocoder'}); "
                f"{r.tail_s:.2f} s after the last step"
            )
            typer.echo(
                f"      vocoder: {r.vocoder_s_per_audio_s:.3f} s per audio-s, "
                f"{r.vocoder_padding:.1%} frames of bucket padding"
            )
            typer.echo(
                f"      measures (peak, rms, silence, repeats, chars/s; writer threads): "
                f"{_rate(r.measures_s_per_audio_s)}"
            )
            typer.echo(_step_line(r.step_ms, synced=dev.type == "cuda"))
            by_mode[r.mode] = r.row()
            rows.append(r.row())
        if fast in by_mode and "eager" in by_mode:
            ratio = by_mode[fast]["audio_s_per_s"] / by_mode["eager"]["audio_s_per_s"]
            typer.echo(f"      {fast} / eager: {ratio:.2f}x")
    typer.echo(
        "      * auto: the memory plan's batch size; roofline: the step's lower bound "
        "(bytes / bandwidth, FLOPs / peak) over its measured time"
    )
    if compare:
        typer.echo("      official qwen-tts: not run here; see tools/compare_official_cpu.py")
    return rows


def _steady_line(r) -> str:
    """The whole run's audio-s/s beside the steady state's (groups after the first, first fill
    left out), or why there is no steady state."""
    whole = f"whole run {r.audio_s_per_s:.2f} audio-s/s over {r.requests} requests"
    if r.steady_audio_s_per_s is None:
        return f"{whole}; steady state: one group only (give more --passes)"
    return (
        f"{whole}; steady state {r.steady_audio_s_per_s:.2f} audio-s/s over "
        f"{r.groups - 1} groups after the first"
    )


def _rate(s_per_audio_s: float) -> str:
    """Seconds per audio-second, and its inverse: audio-seconds measured per second."""
    per_s = f"{1 / s_per_audio_s:,.0f} audio-s/s" if s_per_audio_s > 0 else "unmeasured"
    return f"{s_per_audio_s * 1e6:.1f} µs per audio-s ({per_s})"


def _step_line(step_ms: dict, synced: bool) -> str:
    """The plain step (and the graph replay), then the instrumented step: a separate set of
    steps timed part by part, whose parts add up to it (core/bench/step_parts.py). synced: the
    device is synced at each part (a GPU), so the instrumented step carries that overhead; a CPU
    has nothing to sync, so both figures time the same work and a wide gap between them is load."""
    parts, n = step_ms["parts"], step_ms.get("repeats", 5)
    plain = f"{step_ms['step']:.2f} ms (plain decode step, unsynced, mean of {n})"
    graph = ""
    if "graph_step" in step_ms:
        graph = f"; graph replay {step_ms['graph_step']:.2f} ms (mean of {n})"
    split = " + ".join(f"{k} {parts[k]:.2f}" for k in parts if k != "instrumented_step")
    instrumented = parts["instrumented_step"]
    if synced:
        how = (
            f"{n} further steps, synced at each part: sync overhead included; "
            "the parts add up to this, not to the step above"
        )
    else:
        how = f"{n} further steps, timed at each part; no sync on a CPU: the same work as above"
    lines = [
        f"      step: {plain}{graph}",
        f"      instrumented step: {instrumented:.2f} ms = {split} ({how})",
    ]
    gap = max(instrumented, step_ms["step"]) / max(min(instrumented, step_ms["step"]), 1e-9)
    if not synced and gap > LOAD_GAP:
        lines.append(
            f"      the two sets of steps differ {gap:.1f}x for the same work: the machine was "
            "busy (other processes on its cores); time on an idle machine"
        )
    return "\n".join(lines)


def _machine(device: str) -> dict:
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
    }
    if device == "cpu" or not torch.cuda.is_available():
        from qtts.core.engine.cpu_runtime import cpu_budget

        budget = cpu_budget()
        info["cpu_budget"] = {
            "policy": budget.policy,
            "threads": budget.threads,
            "vocoder_thread": budget.vocoder_thread,
        }
    if torch.cuda.is_available() and device != "cpu":
        info["gpu"] = torch.cuda.get_device_name()
    return info
