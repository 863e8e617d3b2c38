"""Engines on the tiny in-memory model (tests/unit/conftest.py `tiny`) for CPU tests: prompts,
tuning, and a continuous-batching run to codes."""

from __future__ import annotations

from dataclasses import replace

import torch

from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.loop.engine import Engine
from qtts.core.engine.loop.scheduler import EngineRequest, run_continuous
from qtts.core.engine.step.slots import SlotState
from qtts.core.model.config import SamplingParams
from qtts.core.synthesis.prompt import embed_prompt, normalize_row, pad_embedding, prompt_tokens

TEXTS = ["Hi.", "A somewhat longer sentence to pad against.", "Mid length line here.",
         "Short one.", "Another fairly long line of text for the test.", "Ok."]  # fmt: skip


def sampling(greedy: bool) -> SamplingParams:
    """The checkpoints' defaults (top-k 50, penalty 1.05), greedy or sampled."""
    return SamplingParams(
        do_sample=not greedy, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05
    )


def gpu_tuning(**overrides) -> EngineTuning:
    """The GPU defaults (fused layer ops, grouped attention, padded group prefill, no host sync)
    without CUDA graphs, for CPU or meta tensors; environment ignored."""
    base = EngineTuning.for_device("cuda", env={})
    return replace(base, **{"cuda_graphs": False, **overrides})


# The decode step's layer paths, with the GPU's other tuning: the fused ops the GPU runs, its
# twin (the module path) and the CPU's packed predictor.
GPU_PATHS = {
    "fused": {},
    "module": {"layer_path": "module"},
    "packed": {"layer_path": "packed"},
}


def gpu_path_tuning(path: str) -> EngineTuning:
    return gpu_tuning(**GPU_PATHS[path])


def cpu_tuning(dtype: torch.dtype = torch.float32, **overrides) -> EngineTuning:
    """The CPU defaults for `dtype` (environment ignored), checking every 2 steps with
    16-position views so that refills and view growth happen within a few frames."""
    base = EngineTuning.for_device("cpu", env={}, dtype=dtype)
    return replace(base, **{"check_every": 2, "view_bucket": 16, **overrides})


def prompts(tiny, texts=TEXTS) -> list:
    config, model, tok = tiny
    out = []
    for text in texts:
        spk, lang, ins, _ = normalize_row(config, "vivian", "english", None)
        out.append(
            embed_prompt(model.talker, config, prompt_tokens(config, tok, text, spk, lang, ins))
        )
    return out


def engine(
    tiny,
    slots: int,
    greedy: bool,
    tuning: EngineTuning | None = None,
    *,
    max_len: int = 128,
    max_frames: int = 16,
    max_trailing: int = 1,
    device="cpu",
    dtype=torch.float32,
) -> Engine:
    config, model, _ = tiny
    params = sampling(greedy)
    state = SlotState(config, slots, max_len, max_frames, max_trailing, talker=params,
                      subtalker=params, dtype=dtype, device=device)  # fmt: skip
    return Engine(model, config, state, pad_embedding(model.talker, config),
                  tuning or cpu_tuning(dtype))  # fmt: skip


def engine_requests(prompt_list, budget0: int = 6, seed0: int = 100) -> list[EngineRequest]:
    """Request i: budget budget0 + i (so rows finish at different steps), seed seed0 + i."""
    return [EngineRequest(i, pr, budget0 + i, seed0 + i) for i, pr in enumerate(prompt_list)]


def run_codes(eng: Engine, requests, step=None) -> dict:
    out = {}
    for done in run_continuous(eng, requests, step=step):
        for d in done:
            assert d.key not in out, f"request {d.key} came back twice"
            out[d.key] = d.codes
    return out


def prefilled(
    tiny, slots: int, filled: int, greedy: bool, tuning=None, budget: int = 12, device="cpu"
):
    """An engine with `filled` of its `slots` prefilled (slot i: prompt i, seed 7 + i); the rest
    stay empty and ride along as masked no-ops."""
    from qtts.core.engine.step.slots import SlotFill

    eng = engine(tiny, slots, greedy, tuning, device=device)
    fills = [SlotFill(i, pr, budget, 7 + i) for i, pr in enumerate(prompts(tiny)[:filled])]
    eng.prefill(fills)
    return eng


def on_meta(tiny):
    """The same model, config and tokenizer with every weight on the meta device (no values)."""
    import copy

    config, model, tok = tiny
    return config, copy.deepcopy(model).to("meta"), tok
