"""This job's memory plan on this device: the requests' shapes, the device's byte budget and the
loaded model's size, handed to the planner (qtts.core.engine.plan.planner). Also the refusal a user
sees when an explicit --batch-size cannot fit. Knows requests, prompts and devices.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.plan.footprint import Dims
from qtts.core.engine.plan.planner import GIB, MemoryPlan, RowShape, plan_memory
from qtts.core.errors import UsageError
from qtts.core.model.codec import SpeechDecoderConfig
from qtts.core.model.config import ModelConfig
from qtts.core.synthesis.prompt import PromptTokens, prompt_length, trailing_length
from qtts.core.synthesis.requests import Placement


class MemoryPlanError(UsageError):
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


def dims_for(config: ModelConfig, decoder: SpeechDecoderConfig, dtype: torch.dtype) -> Dims:
    """The talker and the decoder both run in the job dtype."""
    act = torch.empty((), dtype=dtype).element_size()
    return Dims.of(config, decoder, act, act)


def fitting_plan(
    shapes: Sequence[RowShape],
    dims: Dims,
    budget_bytes: int,
    weights_bytes: int,
    tuning: EngineTuning,
    batch_size: int | None,
    device_kind: str,
) -> MemoryPlan:
    """plan_memory, raising MemoryPlanError (naming the largest batch size that fits) when an
    explicit batch size does not fit; an auto plan that cannot fit even one slot raises too."""
    plan = plan_memory(
        shapes,
        dims,
        budget_bytes=budget_bytes,
        weights_bytes=weights_bytes,
        tuning=tuning,
        batch_size=batch_size,
        device_kind=device_kind,
    )
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


def weights_bytes(model, decoder, tuning: EngineTuning, encoder_dir: Path | None = None) -> int:
    """What a job holds on its device (real or meta modules): the weights, the packed predictor
    copy when the tuning pack it (CPU), and the Mimi encoder in `encoder_dir` (Base checkpoints'
    speech_tokenizer/, loaded for voice-clone rows; None: no encoder)."""
    weights = module_bytes([model, decoder])
    if tuning.layer_path == "packed":
        weights += packed_copy_bytes(model)
    if encoder_dir is not None:
        weights += speech_encoder_bytes(encoder_dir)
    return weights


def plan_rows(
    config: ModelConfig,
    model,
    decoder,
    budgets: Sequence[int],
    tokens: Sequence[PromptTokens],
    device: torch.device,
    tuning: EngineTuning,
    batch_size: int | None,
    encoder_dir: Path | None = None,
) -> MemoryPlan:
    """The memory plan of rows (frame budgets, prompt tokens) for `model` and `decoder` held on
    `device`, running the engine `tuning` describe: `qtts batch` and `qtts bench` plan here."""
    weights = weights_bytes(model, decoder, tuning, encoder_dir)
    dtype = model.talker.codec_head.weight.dtype
    dims = dims_for(config, decoder.cfg, dtype)
    return fitting_plan(
        row_shapes(budgets, tokens),
        dims,
        budget_bytes=device_budget(device),
        weights_bytes=weights,
        tuning=tuning,
        batch_size=batch_size,
        device_kind=device.type,
    )


def plan_without_weights(text_model, requests, placement: Placement) -> MemoryPlan:
    """plan_rows with the model built on the meta device (nothing loaded). A Base row's
    reference is counted from its clip's duration (in-context rows prefill its frames)."""
    from qtts.core.model.codec import SpeechDecoder
    from qtts.core.model.loader import parse_device, parse_dtype
    from qtts.core.model.talker import build_model

    dev = parse_device(placement.device)
    dt = parse_dtype(placement.dtype, dev)
    st = text_model.model_dir / "speech_tokenizer"
    decoder_cfg = SpeechDecoderConfig.from_dict(json.loads((st / "config.json").read_text()))
    with torch.device("meta"):
        model = build_model(text_model.config).to(dt)
        decoder = SpeechDecoder(decoder_cfg).to(dt)
    base = text_model.config.tts_model_type == "base"
    return plan_rows(
        text_model.config,
        model,
        decoder,
        budgets=[r.max_new_tokens for r in requests],
        tokens=request_tokens(text_model, requests),
        device=dev,
        tuning=EngineTuning.for_device(dev, dtype=dt),
        batch_size=placement.batch_size,
        encoder_dir=st if base else None,
    )


def request_tokens(text_model, requests) -> list[PromptTokens]:
    """Each request's prompt tokens as its engine pass would prefill them (text_model: a
    CheckpointText, its config and tokenizer)."""
    from qtts.core.synthesis.prompt import prompt_tokens

    tokenizer, config = text_model.tokenizer, text_model.config
    tokens = [
        prompt_tokens(
            config,
            tokenizer,
            text=r.text,
            speaker=r.speaker,
            language=r.language,
            instruct=r.instruct,
        )
        for r in requests
    ]
    if config.tts_model_type == "base":
        tokens = [_clone_estimate(t, tokenizer, r) for t, r in zip(tokens, requests, strict=True)]
    return tokens


def _clone_estimate(tokens, tokenizer, request):
    from qtts.core.synthesis.prompt import clone_tokens

    frames = 0
    if request.ref_text is not None and request.voice is not None:
        from qtts.core.model.voice_file import read_header

        frames = read_header(request.voice).frames
    elif request.ref_text is not None:
        import soundfile as sf

        frames = int(sf.info(request.ref_audio).duration * 12.5) + 1
    return clone_tokens(tokens, tokenizer, request.ref_text, frames)
