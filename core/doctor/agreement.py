"""The checks that two ways of running the same model agree: the fused layer path vs the module
path (its twin), CUDA-graph replay vs eager steps, and bf16 vs fp32 teacher-forced."""

from __future__ import annotations

from dataclasses import replace

import torch

from qtts.core.bench.throughput import random_models
from qtts.core.doctor.decode import (
    AUDIO_CODES,
    Workload,
    build,
    exact_fp32,
    few_threads,
    first_difference,
    greedy_codes,
    prompts,
)
from qtts.core.doctor.runner import Check, DoctorRun, bf16_not_here, skipped, verdict
from qtts.core.doctor.teacher_forcing import agreement, forced_logits
from qtts.core.engine.device.tuning import EngineTuning

# bf16 keeps 8 significant bits: through the layers logits move by ~1% of their range. A cast in
# the wrong place or fp32 logits lost shows as tens of percent and broken argmaxes. Random weights
# give flat logits, so near-ties that bf16 rounding flips are common: at the 0.6b dims the torch
# twins agree on 98.4% of argmaxes (worst logit diff 1.5%), the small dims on 99.8%. The bounds
# are the bf16 tests': each of talker and predictor >= 95%, logits within 5%.
BF16_MIN_AGREEMENT = 0.95
BF16_LOGIT_REL_TOL = 0.05
# fp32 both ways, only summation order differs (fused q/k/v and gate/up, the Triton ops): ulps.
FP32_MIN_AGREEMENT = 0.99
FP32_LOGIT_REL_TOL = 1e-3

LAYER_WORK = {"cpu": Workload(rows=3, slots=2, frames=8), "cuda": Workload(6, 4, 24)}
# On CUDA the rows outgrow the first 256-position view: several graphs replay.
GRAPH_WORK = Workload(rows=6, slots=4, frames=260)
FORCED_WORK = {"cpu": Workload(4, 4, 8), "cuda": Workload(8, 8, 32)}


def _tuning(device, dtype=torch.float32, **changes) -> EngineTuning:
    """The device's defaults for `dtype` without the environment's knobs: the doctor names what
    it compares."""
    return replace(EngineTuning.for_device(device, env={}, dtype=dtype), **changes)


def _forced(models, device, tuning, codes) -> dict:
    config, model, _ = models
    work = Workload(len(codes), len(codes), max(int(c.shape[0]) for c in codes))
    engine = build(models, device, tuning, work).engine
    return forced_logits(engine, prompts(config, model, work.rows), codes)


def _agreement_figures(a, b) -> dict:
    out = {}
    for label, books in (
        ("talker", range(0, 1)),
        ("predictor", range(1, 16)),
        ("all", range(0, 16)),
    ):
        same, worst, sites = agreement(a, b, books, AUDIO_CODES)
        out[label] = {
            "argmax_agreement": round(same, 4),
            "worst_logit_rel_diff": worst,
            "sites": sites,
        }
    return out


def layer_paths(run: DoctorRun) -> Check:
    """Greedy fp32 codes through the fused ops (on CPU their torch twins) == the module path's.
    CPU: the same tokens, as the unit tests assert. CUDA: the Triton ops and cuBLAS may sum in
    another order, so a near-tie may flip and free-running codes then diverge; there the check is
    teacher-forced argmax agreement and logit closeness, with the exact match as a figure."""
    name = "layer paths: fused == module"
    dev = run.device
    work = LAYER_WORK[dev.type]
    with exact_fp32(), few_threads(dev):
        models = random_models(run.size, dev, torch.float32)
        codes = {
            path: greedy_codes(models, dev, _tuning(dev, cuda_graphs=False, layer_path=path), work)
            for path in ("module", "fused")
        }
        diff = first_difference(codes["module"], codes["fused"])
        figures = {
            "dtype": "float32",
            "rows": work.rows,
            "frames": work.frames,
            "codes_equal": diff is None,
        }
        if not run.cuda:
            same = f"{work.rows} rows x {work.frames} frames: the same codes (the fused ops ran "
            return verdict(name, diff is None, diff or same + "their torch twins)", figures)
        logits = {
            path: _forced(
                models, dev, _tuning(dev, cuda_graphs=False, layer_path=path), codes["module"]
            )
            for path in ("module", "fused")
        }
    figures["teacher_forced"] = fig = _agreement_figures(logits["module"], logits["fused"])
    same, worst = fig["all"]["argmax_agreement"], fig["all"]["worst_logit_rel_diff"]
    held = same >= FP32_MIN_AGREEMENT and worst <= FP32_LOGIT_REL_TOL
    return verdict(
        name,
        held,
        f"teacher-forced argmax agreement {same:.2%} (>= "
        f"{FP32_MIN_AGREEMENT:.0%}), worst logit diff {worst:.1e} (<= "
        f"{FP32_LOGIT_REL_TOL:g}); free-running codes "
        f"{'equal' if diff is None else 'differ: ' + diff}",
        figures,
    )


def graph_replay(run: DoctorRun) -> Check:
    """Greedy fp32 codes with every decode step replayed from CUDA graphs == eager steps, on the
    GPU's default layer path, with refills and several KV views."""
    name = "graph replay == eager"
    if not run.cuda:
        return skipped(name, "needs CUDA (graphs are captured on a GPU only)")
    dev = run.device
    with exact_fp32(), few_threads(dev):
        models = random_models(run.size, dev, torch.float32)
        eager = greedy_codes(models, dev, _tuning(dev, cuda_graphs=False), GRAPH_WORK)
        graphed = greedy_codes(models, dev, _tuning(dev, cuda_graphs=True), GRAPH_WORK)
    diff = first_difference(eager, graphed)
    figures = {
        "dtype": "float32",
        "rows": GRAPH_WORK.rows,
        "slots": GRAPH_WORK.slots,
        "frames": GRAPH_WORK.frames,
    }
    return verdict(
        name,
        diff is None,
        diff
        or f"{GRAPH_WORK.rows} rows x {GRAPH_WORK.frames} "
        f"frames over {GRAPH_WORK.slots} slots: the same codes",
        figures,
    )


def bf16_vs_fp32(run: DoctorRun) -> Check:
    """bf16 weights and activations track fp32: both forced to fp32's own greedy codes, argmax
    agreement over every sampling site and the worst logit difference (the device's layer path,
    eager). Where bf16 runs: on CUDA, and on a CPU whose `--dtype auto` is bf16."""
    name = "bf16 tracks fp32 (teacher-forced)"
    why_not = bf16_not_here(run)
    if why_not:
        return skipped(name, why_not)
    dev = run.device
    work = FORCED_WORK[dev.type]
    tuning = _tuning(dev, torch.bfloat16, cuda_graphs=False)  # bf16's path, for both
    with exact_fp32(), few_threads(dev):
        fp32 = random_models(run.size, dev, torch.float32)
        codes = greedy_codes(fp32, dev, tuning, work)  # fp32's free-running decode: forced
        reference = _forced(fp32, dev, tuning, codes)
        del fp32
        bf16 = random_models(run.size, dev, torch.bfloat16)  # the same draw, cast
        logits = _forced(bf16, dev, tuning, codes)
    fig = _agreement_figures(reference, logits)
    same, worst = fig["all"]["argmax_agreement"], fig["all"]["worst_logit_rel_diff"]
    talker, predictor = fig["talker"]["argmax_agreement"], fig["predictor"]["argmax_agreement"]
    held = min(talker, predictor) >= BF16_MIN_AGREEMENT and worst <= BF16_LOGIT_REL_TOL
    detail = (
        f"argmax agreement {same:.2%} (talker {talker:.2%}, predictor {predictor:.2%}; each >= "
        f"{BF16_MIN_AGREEMENT:.0%}), worst logit diff {worst:.3f} (<= {BF16_LOGIT_REL_TOL}) "
        f"over {fig['all']['sites']} sites"
    )
    return verdict(name, held, detail, {"layer_path": tuning.layer_path, **fig})
