"""This job's memory plan on this device: the requests' shapes, the device's byte budget and the
loaded model's size, handed to the planner (qtts.core.engine.planner). Also the refusal a user
sees when an explicit --batch-size cannot fit. Knows requests, prompts and devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from qtts.core.engine.footprint import Dims
from qtts.core.engine.planner import MemoryPlan, RowShape, plan_memory
from qtts.core.engine.settings import EngineSettings
from qtts.core.model.codec import SpeechDecoderConfig
from qtts.core.model.config import ModelConfig
from qtts.core.synthesis.prompt import PromptTokens, prompt_length, trailing_length

GIB = 2**30


class MemoryPlanError(ValueError):
    """The requested batch size cannot fit (a usage error: nothing was synthesized)."""


def row_shapes(budgets: Sequence[int], tokens: Sequence[PromptTokens]) -> list[RowShape]:
    return [
        RowShape(prompt_length(t), b, trailing_length(t))
        for b, t in zip(budgets, tokens, strict=True)
    ]


def module_bytes(modules: Iterable[torch.nn.Module]) -> int:
    """Parameters and buffers, in the dtypes they are held in (meta modules count too)."""
    return sum(
        t.numel() * t.element_size() for m in modules for t in [*m.parameters(), *m.buffers()]
    )


def packed_copy_bytes(model) -> int:
    """What the CPU's packed predictor step duplicates: the predictor layers' matrices."""
    layers = model.talker.code_predictor.model.layers
    return sum(
        p.numel() * p.element_size() for layer in layers for p in layer.parameters() if p.dim() == 2
    )


def device_budget(device: torch.device) -> int:
    """Bytes this process may hold on `device`: free plus what torch already holds (the weights
    count against the plan). CPU: available RAM plus this process's resident size."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device)
    return available_ram() + resident_bytes()


def available_ram() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return 0
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")


def dims_for(
    config: ModelConfig, decoder: SpeechDecoderConfig, dtype: torch.dtype, device_kind: str
) -> Dims:
    """The decoder runs in fp32 on CPU (as the official code does) and in the job dtype on GPU."""
    act = torch.empty((), dtype=dtype).element_size()
    return Dims.of(config, decoder, act, act if device_kind == "cuda" else 4)


def plan_job(
    shapes: Sequence[RowShape],
    dims: Dims,
    budget_bytes: int,
    weights_bytes: int,
    settings: EngineSettings,
    batch_size: int | None,
    device_kind: str,
) -> MemoryPlan:
    """plan_memory, raising MemoryPlanError (naming the largest batch size that fits) when an
    explicit batch size does not fit; an auto plan that cannot fit even one slot raises too."""
    plan = plan_memory(shapes, dims, budget_bytes, weights_bytes, settings, batch_size, device_kind)
    if not plan.fits:
        raise MemoryPlanError(refusal(plan, device_kind))
    return plan


def refusal(plan: MemoryPlan, device_kind: str) -> str:
    memory = "GPU memory" if device_kind == "cuda" else "RAM"
    need = f"needs {plan.total_bytes / GIB:.2f} GiB of {plan.budget_bytes / GIB:.2f} GiB {memory}"
    if plan.requested is not None and plan.largest_fitting:
        return (
            f"--batch-size {plan.requested} does not fit: the plan {need}; the largest batch "
            f"size that fits is {plan.largest_fitting} (or use --batch-size auto)"
        )
    longest = max((g.kv_len for g in plan.groups), default=0)
    return (
        f"not even one slot fits: the plan {need} (longest row needs {longest} KV positions); "
        "lower --max-new-tokens, shorten the rows, or use a smaller model or --dtype bfloat16"
    )


def speech_encoder_bytes(st_dir: Path) -> int:
    """The speech tokenizer's encoder (Mimi, fp32), loaded for in-context voice-clone rows."""
    from safetensors import safe_open

    total = 0
    for path in sorted(st_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                if key.startswith("encoder."):
                    shape = f.get_slice(key).get_shape()
                    total += 4 * int(torch.Size(shape).numel())
    return total
