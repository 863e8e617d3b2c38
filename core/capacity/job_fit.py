"""`qtts plan`: a job's memory plan and decode-step roofline before any GPU time is spent.

Works on a CPU-only machine and allocates no model: dimensions come from a checkpoint's config
files (--model) or the published sizes (--size), weights are counted on the meta device, and rows
come from an input file (token counts from the checkpoint's tokenizer, or estimated without one)
or from --text-tokens. The plan is the one `qtts batch` would make on a card of that size
(qtts.core.engine.plan.planner). Knows files, configs and tokenizers; allocates no tensors.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from qtts.core.capacity.vocoder_cost import vocoder_cost
from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.plan.footprint import Dims
from qtts.core.engine.plan.planner import GIB, MemoryPlan, RowShape
from qtts.core.engine.plan.roofline import FRAME_S, DeviceSpec, decode_step_cost
from qtts.core.jobs.contract.spec import ManifestColumns, SplitOptions
from qtts.core.jobs.work.chunks import (
    FrameBudget,
    InputRequests,
    input_requests,
    settle_segment_limit,
)
from qtts.core.model.codec import SpeechDecoder, SpeechDecoderConfig
from qtts.core.model.config import GenerationDefaults, ModelConfig
from qtts.core.model.sizes import decoder_config, model_config
from qtts.core.model.talker import build_model
from qtts.core.synthesis.memory_plan import dims_for, row_shapes, weights_bytes
from qtts.core.synthesis.prompt import PromptTokens

PUBLISHED_MAX_NEW_TOKENS = 8192  # generation_config.json of the published checkpoints
ESTIMATED_BYTES_PER_TOKEN = 3  # Qwen2 BPE: ~4 bytes per English token, ~3 per CJK character


@dataclass(frozen=True)
class EstimatedText:
    """The text side of a published size (no tokenizer): token counts from the text's bytes."""

    name: str
    config: ModelConfig
    max_tokens_per_byte: float | None = None  # unknown: the length check counts every row

    def count_text_tokens(self, texts: Sequence[str]) -> list[int]:
        return [max(1, math.ceil(len(t.encode()) / ESTIMATED_BYTES_PER_TOKEN)) for t in texts]


@dataclass(frozen=True)
class PlanModel:
    name: str
    config: ModelConfig
    decoder: SpeechDecoderConfig
    max_new_tokens: int  # the checkpoint's cap
    weights_bytes: int
    dims: Dims
    dtype: torch.dtype
    model_dir: Path | None = None


def plan_model(model: str | None, size: str | None, dtype: torch.dtype) -> PlanModel:
    """Dimensions and weight bytes of a checkpoint dir (--model) or a published size (--size)."""
    if (model is None) == (size is None):
        raise ValueError("give either --model DIR or --size 0.6b|1.7b")
    if size is not None:
        config, decoder, cap, name, model_dir = (
            model_config(size),
            decoder_config(size),
            PUBLISHED_MAX_NEW_TOKENS,
            size,
            None,
        )
    else:
        from qtts.core.model.hub import resolve_model_dir

        model_dir = resolve_model_dir(model)
        config = ModelConfig.from_file(model_dir / "config.json")
        st = json.loads((model_dir / "speech_tokenizer" / "config.json").read_text("utf-8"))
        decoder = SpeechDecoderConfig.from_dict(st)
        cap = GenerationDefaults.from_file(model_dir / "generation_config.json").max_new_tokens
        name = model
    with torch.device("meta"):
        talker, vocoder = build_model(config).to(dtype), SpeechDecoder(decoder).to(dtype)
    base = model_dir is not None and config.tts_model_type == "base"
    weights = weights_bytes(
        talker,
        vocoder,
        EngineTuning.for_device("cuda", env={}),
        model_dir / "speech_tokenizer" if base else None,
    )
    dims = dims_for(config, decoder, dtype)
    return PlanModel(
        name=name,
        config=config,
        decoder=decoder,
        max_new_tokens=cap,
        weights_bytes=weights,
        dims=dims,
        dtype=dtype,
        model_dir=model_dir,
    )


def synthetic_tokens(config: ModelConfig, text_tokens: int) -> PromptTokens:
    """The ids layout of a CustomVoice/VoiceDesign row with `text_tokens` text tokens."""
    speaker = 0 if config.uses_speaker else None
    return PromptTokens([0] * (text_tokens + 8), None, [0] * 4, speaker)


def synthetic_shapes(
    m: PlanModel, text_tokens: int, rows: int, max_new_tokens: int | None
) -> tuple[list[RowShape], list[int]]:
    """(shapes, expected frames per row) of `rows` rows of `text_tokens` text tokens."""
    b = FrameBudget(m.max_new_tokens, max_new_tokens)
    shapes = row_shapes(
        [b.max_new_tokens(text_tokens)] * rows, [synthetic_tokens(m.config, text_tokens)] * rows
    )
    return shapes, [b.estimate_frames(text_tokens)] * rows


def input_shapes(
    m: PlanModel,
    source: str,
    max_new_tokens: int | None,
    split: SplitOptions,
    speaker: str | None,
    columns: ManifestColumns | None = None,
) -> tuple[list[RowShape], InputRequests, str]:
    """Shapes of the requests the job would run for an input file's rows (a long row's segments
    in its place), those requests' summary, and a note on how their tokens were counted."""
    budget = FrameBudget(m.max_new_tokens, max_new_tokens, m.config.talker.max_position_embeddings)
    split = settle_segment_limit(split, budget)
    if m.model_dir is None:  # no tokenizer: estimate from the text's length
        text = EstimatedText(m.name, m.config)
        note = f"token counts estimated at {ESTIMATED_BYTES_PER_TOKEN} bytes each (no tokenizer)"
    else:
        from qtts.core.synthesis.session import CheckpointText

        text = CheckpointText(m.name, m.model_dir)
        note = "token counts from the checkpoint's tokenizer"
    got = input_requests(text, source, budget, split=split, speaker=speaker, columns=columns)
    if m.model_dir is None:
        counts = text.count_text_tokens([r.text for r in got.requests])
        tokens = [synthetic_tokens(m.config, n) for n in counts]
    else:
        from qtts.core.synthesis.memory_plan import request_tokens

        tokens = request_tokens(text, got.requests)
    if split.enabled:
        note += f"; --split {split.mode.value}, segments of at most {split.limit} tokens"
    return row_shapes([r.max_new_tokens for r in got.requests], tokens), got, note


def report(
    plan: MemoryPlan, m: PlanModel, device: DeviceSpec, rows: int, frames: int
) -> tuple[list[str], dict]:
    """The table lines and the JSON object (the last stdout line) for a plan; rows: the job's
    rows, frames: what they should make (the job's estimate)."""
    g = plan.peak_group
    lines = [
        f"{'component':<20}{'GiB':>9}",
        f"{'weights':<20}{plan.weights_bytes / GIB:>9.2f}",
    ]
    if g is not None:
        lines += [
            f"{'KV cache':<20}{g.kv_bytes / GIB:>9.2f}   {g.slots} slots x {g.kv_len} positions",
            f"{'slot state (rest)':<20}{(g.state_bytes - g.kv_bytes) / GIB:>9.2f}",
            f"{'decode step':<20}{g.activation_bytes / GIB:>9.2f}   "
            + ("the CUDA graph pool" if plan.graphs else "activations"),
            f"{'prefill pass':<20}{g.prefill_bytes / GIB:>9.2f}   {g.prefill_rows} prompts",
        ]
    lines += [
        f"{'vocoder':<20}{plan.vocoder_bytes / GIB:>9.2f}   {plan.vocoder_batch} rows at once"
        + (f", at most {plan.vocoder_graphs} CUDA graphs (window shapes)" if plan.graphs else ""),
        f"{'margin':<20}{plan.margin_bytes / GIB:>9.2f}",
        f"{'total':<20}{plan.total_bytes / GIB:>9.2f}   of {plan.budget_bytes / GIB:.2f}: "
        + ("fits" if plan.fits else "DOES NOT FIT"),
        "",
        f"{'length group':<14}{'rows':>10}{'KV positions':>14}{'slots':>8}{'graphs':>8}",
        *(
            f"{k:<14}{len(x.rows):>10,}{x.kv_len:>14,}{x.slots:>8}{len(x.views):>8}"
            for k, x in enumerate(plan.groups, start=1)
        ),
    ]
    if plan.graphs:
        lines.append(
            f"one-time work: {plan.decode_graphs} decode-step CUDA graph(s), captured as each "
            f"pass starts; vocoder window graphs as the job's rows first need them (at most "
            f"{plan.vocoder_graphs}, on the vocoder's thread beside decoding)"
        )
    if not plan.fits:
        lines.append(
            f"largest batch size that fits: {plan.largest_fitting}"
            if plan.largest_fitting
            else "not even one slot fits"
        )
    out = plan.as_json()
    if g is not None and g.slots:
        # A slot attends over its prompt plus what it has generated so far: on average about
        # half of its group's KV length (rows in a group need within a quarter of each other).
        view = max(1, g.kv_len // 2)
        from qtts.core.bench.launches import launches_per_step

        launches = launches_per_step(m.config, g.slots)["launches_per_step"]
        cost = decode_step_cost(m.config, g.slots, view, m.dims.act_bytes, launches)
        bound, bounds = cost.lower_bound_s(device), cost.bounds_s(device)
        decode_ceiling = cost.ceiling_audio_s_per_s(g.slots, device)
        vocoder = vocoder_cost(m.decoder, m.dtype)
        vocoder_s = vocoder.seconds_per_audio_s(device, plan.vocoder_batch)
        ceiling = 1.0 / (1.0 / decode_ceiling + vocoder_s)  # both share the GPU's time
        lines += [
            f"roofline: decode step at {g.slots} slots, mean KV view {view}, on {device.name}",
            f"  moves {cost.bytes / 1e9:.2f} GB (weights {cost.weight_bytes / 1e9:.2f}, KV "
            f"{cost.kv_bytes / 1e9:.2f}) -> {bounds['memory'] * 1e3:.2f} ms; "
            f"{cost.flops / 1e12:.3f} TFLOP -> {bounds['compute'] * 1e3:.2f} ms; "
            f"{launches} launches x {device.launch_s * 1e6:g} us -> "
            f"{bounds['launches'] * 1e3:.2f} ms",
            f"  decode ceiling {decode_ceiling:,.0f} audio-s/s "
            f"(lower bound {bound * 1e3:.2f} ms per step, set by {max(bounds, key=bounds.get)})",
            f"roofline: vocoder, {vocoder.flops_per_audio_s / 1e9:.1f} GFLOP and "
            f"{vocoder.bytes_per_audio_s(plan.vocoder_batch) / 1e9:.2f} GB per audio-second "
            f"(counted on the meta device) -> {1 / vocoder_s:,.0f} audio-s/s alone",
            f"  ceiling {ceiling:,.0f} audio-s/s (decode and vocoder sharing the GPU)",
        ]
        out["roofline"] = {
            "device": device.name,
            "slots": g.slots,
            "view": view,
            "bytes": cost.bytes,
            "flops": cost.flops,
            "launches": launches,
            "launch_us": device.launch_s * 1e6,
            "bound_ms": {k: v * 1e3 for k, v in bounds.items()},
            "lower_bound_ms": bound * 1e3,
            "decode_ceiling_audio_s_per_s": decode_ceiling,
            "vocoder_flops_per_audio_s": vocoder.flops_per_audio_s,
            "vocoder_bytes_per_audio_s": vocoder.bytes_per_audio_s(plan.vocoder_batch),
            "vocoder_ceiling_audio_s_per_s": 1 / vocoder_s,
            "ceiling_audio_s_per_s": ceiling,
        }
        lines += job_estimate(out, rows, frames, ceiling, device)
    return lines, out


def job_estimate(
    out: dict, rows: int, frames: int, ceiling: float, device: DeviceSpec
) -> list[str]:
    """The job in rows and audio, and its duration at the roofline ceiling (an upper bound on
    speed: the real job is slower), each in the unit that shows it."""
    audio_s = frames * FRAME_S
    seconds = audio_s / ceiling
    out["job"] = {
        "rows": rows,
        "audio_hours": audio_s / 3600,
        "hours_at_ceiling": seconds / 3600,
        "seconds_at_ceiling": seconds,
    }
    return [
        f"job: {rows:,} rows, about {duration(audio_s)} of audio (frame estimate); "
        f"at least {duration(seconds)} on one {device.name.split(' (')[0]} "
        "(at the roofline ceiling: an upper bound on speed)"
    ]


def duration(seconds: float) -> str:
    """Seconds in the unit that shows them: 41.3 s, 12.5 min, 3.20 h."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.2f} h"
