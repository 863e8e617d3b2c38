"""`qtts bench --size`: each batch size on random weights of a real model size, the fast path and
optionally its eager twin, a row per measurement printed as it comes (core/bench/lines.py); the
launch counts of `--count-launches`; and the machine a bench ran on. The command
(cli/bench_command.py) only parses its options and prints the JSON line.
"""

from __future__ import annotations

import platform

from qtts.core.bench.lines import rate, steady_line, step_line, time_line


def auto_size(device: str, count_launches: bool) -> tuple[str, str | None]:
    """--size auto: (the size, a line to say or None): the published 0.6b dims on CUDA (and for
    launch counts, which run on the meta device), the small ones on a CPU."""
    if count_launches:
        return "0.6b", None
    import torch

    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        return "0.6b", None
    return "small", (
        "qtts bench: --size auto is small on a CPU (--size 0.6b times the published shapes, "
        "minutes a batch)"
    )


def run_sizes(
    size, sizes, *, frames, requests, passes, device, dtype, compare, write, vocoder, emit
) -> list[dict]:
    """Each batch size (None: the memory plan's) on random weights of `size`, in the fast mode
    and, with `compare`, the eager twin: its BenchResult rows, each printed through `emit` as it
    is measured. A size that does not fit prints why and ends the sizes."""
    import time

    started = time.perf_counter()  # torch's import and the random weights: each row's start_s
    from qtts.core.bench.machine import measure
    from qtts.core.bench.throughput import (
        bench_plan,
        fast_mode,
        random_models,
        roofline_fraction,
        run_one,
    )
    from qtts.core.engine.device.cpu_runtime import (
        apply_cpu_budget,
        cpu_budget,
        describe_cpu_budget,
        set_threads,
    )
    from qtts.core.model.loader import parse_device, parse_dtype, use_device
    from qtts.core.synthesis.memory_plan import MemoryPlanError
    from qtts.core.synthesis.oom_backoff import or_none

    dev = parse_device(device)
    use_device(dev)
    dt = parse_dtype(dtype, dev)
    budget = None
    if dev.type == "cpu":  # the job's thread budget, set before anything is measured
        budget = cpu_budget()
        set_threads(budget.threads)
    config, model, decoder = random_models(size, dev, dt)
    start_s = round(time.perf_counter() - started, 3)
    if budget is not None:  # the allocator as a job sets it, once its weights are in place
        kept = apply_cpu_budget(budget.threads, budget.vocoder_thread)
        emit(f"cpu: {describe_cpu_budget(kept=kept)}; dtype {str(dt).removeprefix('torch.')}")
    spec = measure(dev, dt)  # the roofline's device: this machine, measured
    emit(f"roofline device: {spec.name}")
    fast = fast_mode(dev, dt)
    modes = [fast] + (["eager"] if compare and fast != "module" else [])  # module: eager already
    rows = []
    emit(
        f"{'size':6}{'batch':>6}{'mode':>7}{'audio-s/s':>11}{'frames/s':>10}{'RTF':>8}"
        f"{'step ms':>9}{'peak GiB':>9}{'roofline':>10}"
    )
    for b in sizes:
        by_mode = {}
        for mode in modes:
            try:
                plan = bench_plan(config, model, decoder, device=dev, mode=mode, batch=b,
                                  rows=requests or 256, frames=frames)  # fmt: skip
            except MemoryPlanError as e:
                emit(f"{size:6}{b:>6}  {e}")
                break
            r = or_none(
                lambda plan=plan, mode=mode: run_one(
                    size, config, model, decoder, plan=plan, frames=frames, device=dev,
                    requests=requests or passes * plan.slots, mode=mode,
                    write=write and vocoder, vocoder_on=vocoder,
                ),
                dev,
            )  # fmt: skip
            if r is None:
                emit(f"{size:6}{b or 'auto':>6}  out of GPU memory")
                break
            r.roofline = roofline_fraction(r, config, dt.itemsize, spec)
            r.time_split = {"start_s": start_s, **r.time_split}
            step = r.step_ms.get("graph_step", r.step_ms["step"])
            label = f"{r.batch}{'*' if r.auto else ''}"
            emit(
                f"{size:6}{label:>6}{r.mode:>7}{r.audio_s_per_s:>11.2f}"
                f"{r.frames_per_s:>10.1f}{r.rtf:>8.4f}{step:>9.2f}{r.peak_mem_gb or 0:>9.2f}"
                f"{r.roofline['fraction']:>10.1%}"
            )
            emit("      phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in r.phases_s.items()))
            emit(f"      {steady_line(r)}")
            emit(f"      {time_line(r.time_split)}")
            emit(
                f"      decode loop: {r.steps} steps, {r.loop_ms_per_step:.2f} ms per step "
                f"(prefill and an inline vocoder out{'' if vocoder else '; no vocoder'}); "
                f"{r.tail_s:.2f} s after the last step"
            )
            emit(
                f"      vocoder: {r.vocoder_s_per_audio_s:.3f} s per audio-s, "
                f"{r.vocoder_padding:.1%} frames of bucket padding"
            )
            emit(
                f"      measures (peak, rms, silence, repeats, chars/s; writer threads): "
                f"{rate(r.measures_s_per_audio_s)}"
            )
            emit(step_line(r.step_ms, synced=dev.type == "cuda"))
            by_mode[r.mode] = r.row()
            rows.append(r.row())
        if fast in by_mode and "eager" in by_mode:
            ratio = by_mode[fast]["audio_s_per_s"] / by_mode["eager"]["audio_s_per_s"]
            emit(f"      {fast} / eager: {ratio:.2f}x")
    emit(
        "      * auto: the memory plan's batch size; roofline: the step's lower bound "
        "(bytes / bandwidth, FLOPs / peak) over its measured time"
    )
    if compare:
        emit("      official qwen-tts: not run here; see tools/compare_official_cpu.py")
    return rows


def count_sizes(size: str, sizes: list[int], emit) -> list[dict]:
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
    from qtts.core.engine.device.tuning import EngineTuning

    gpu = EngineTuning.for_device("cuda", env={})
    twin = replace(gpu, cuda_graphs=False, layer_path="module")
    rows = []
    emit(
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
        emit(
            f"{batch:>6} {row['launches_per_step']:>9} "
            + " ".join(f"{row['phases'][p]:>17}" for p in PHASES)
            + f" {row['module_path_launches']:>12}"
            + f" {row['prefill_launches_per_layer_pass']:>14} {module:>12}"
        )
    return rows


def machine_info(device: str) -> dict:
    """The versions and the device a bench ran on (its JSON's `machine`)."""
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
    }
    if device == "cpu" or not torch.cuda.is_available():
        from qtts.core.engine.device.cpu_runtime import cpu_budget

        budget = cpu_budget()
        info["cpu_budget"] = {
            "policy": budget.policy,
            "threads": budget.threads,
            "vocoder_thread": budget.vocoder_thread,
        }
    if torch.cuda.is_available() and device != "cpu":
        info["gpu"] = torch.cuda.get_device_name()
    return info
