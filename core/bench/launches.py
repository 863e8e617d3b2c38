"""Kernel launches per decode step and per prefill pass, counted on the meta device (no GPU, no
memory).

`qtts bench --count-launches` builds the real 0.6B/1.7B model on the meta device in bf16, fills
every slot with a sampled row, and runs one `Engine.decode_step` with the GPU's engine tuning:
the code `qtts batch` replays in a CUDA graph. A TorchDispatchMode sees every aten or custom op
it issues; each op that computes counts as its launches (LAUNCHES_PER_OP, 1 by default). Views,
allocations and metadata ops launch nothing and are not counted. Inside a CUDA graph each
launch still costs a few microseconds, so the count is a throughput bound of its own
(qtts.core.engine.plan.roofline). A prefill pass (`count_prefill`) is counted the same way: one
padded group of prompts into their slots, as the engine refills between decode checks, with its
layer passes labelled so that a count per layer pass can be read off. Knows the engine; allocates no
device memory.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.loop.engine import Engine
from qtts.core.engine.step.slots import SlotFill
from qtts.core.model.config import ModelConfig, SamplingParams
from qtts.core.model.sizes import model_config
from qtts.core.model.talker import build_model
from qtts.core.synthesis.engine_driver import EngineDriver, EngineShape
from qtts.core.synthesis.prompt import PromptTokens, embed_prompt

PHASES = ("talker_layers", "predictor_passes", "sampling", "other")
# Ops known to launch more than one kernel on CUDA. qtts::decode_attention and
# qtts::prefill_attention are SDPA (one fused kernel) plus the copy that puts its grouped output
# back in head order.
LAUNCHES_PER_OP = {"qtts.decode_attention": 2, "qtts.prefill_attention": 2}
# Ops that launch no kernel: allocations without a fill, and metadata.
NO_LAUNCH = {
    "empty",
    "empty_strided",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "detach",
    "lift_fresh",
    "_reshape_alias",
    "_unsafe_view",
    "alias",
    "resize_",
}
SAMPLING_OPS = {"qtts.sample_tokens"}
COUNT_PARAMS = SamplingParams(  # the checkpoints' sampled defaults
    do_sample=True, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05
)
COUNT_PROMPT = 64  # prompt positions per slot (the count does not depend on it)
COUNT_VIEW = 256  # the KV view the step attends over (nor on this)
PREFILL_PHASES = ("talker_layers", "sampling", "other")


class LaunchCounter(TorchDispatchMode):
    """Counts launching ops by phase; `phase(name)` labels the ops issued inside it."""

    def __init__(self):
        super().__init__()
        self.by_phase: Counter = Counter()
        self.by_op: Counter = Counter()
        self._phase = "other"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = f"{func.namespace}.{func.overloadpacket.__name__}"
        if _launches_nothing(func):
            return out
        n = LAUNCHES_PER_OP.get(name, 1)
        self.by_op[name] += n
        self.by_phase["sampling" if name in SAMPLING_OPS else self._phase] += n
        return out

    @contextmanager
    def phase(self, name: str):
        saved, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = saved

    @property
    def total(self) -> int:
        return sum(self.by_phase.values())


def _launches_nothing(func) -> bool:
    if func.overloadpacket.__name__ in NO_LAUNCH:
        return True
    # A view: an output that aliases an input without writing it.
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


def meta_engine(model: str | ModelConfig, slots: int, tuning: EngineTuning | None = None) -> Engine:
    """A published size ("0.6b", "1.7b") or a checkpoint's config, in bf16 on the meta device,
    every slot filled with a sampled row."""
    config = model_config(model) if isinstance(model, str) else model
    with torch.device("meta"):
        model = build_model(config).to(device="meta", dtype=torch.bfloat16).eval()
    tuning = tuning or replace(EngineTuning.for_device("cuda", env={}), cuda_graphs=False)
    shape = EngineShape(slots, COUNT_VIEW + 64, 128, 1)
    driver = EngineDriver(model, config, "meta", tuning)
    eng = driver.build(shape, talker=COUNT_PARAMS, subtalker=COUNT_PARAMS).engine
    speaker = 0 if config.uses_speaker else None
    tokens = PromptTokens([0] * COUNT_PROMPT, None, [0] * 4, speaker)
    prompt = embed_prompt(model.talker, config, tokens)
    eng.prefill([_count_fill(i, prompt) for i in range(slots)])
    return eng


def count_decode_step(eng: Engine, view_len: int = COUNT_VIEW) -> LaunchCounter:
    """The launches of one decode step of `eng`, split by phase (the engine's own two stacks)."""
    counter = LaunchCounter()
    phases = {
        "talker_step": "talker_layers",
        "predictor_step": "predictor_passes",
        "predictor_first": "predictor_passes",
    }
    steps = {name: getattr(eng, name) for name in phases}
    for name, phase in phases.items():
        if steps[name] is not None:
            setattr(eng, name, _labelled(counter, phase, steps[name]))
    try:
        with counter, torch.no_grad():
            eng.decode_step(view_len)
    finally:
        for name, step in steps.items():
            setattr(eng, name, step)
    return counter


def launches_per_step(model: str | ModelConfig, slots: int) -> dict:
    """{"launches_per_step": n, "phases": {...}} for one decode step at `slots` slots, on the
    path `qtts batch` runs on a GPU."""
    counter = count_decode_step(meta_engine(model, slots))
    return {
        "launches_per_step": counter.total,
        "phases": {p: counter.by_phase.get(p, 0) for p in PHASES},
    }


def count_prefill(eng: Engine, prompts: int) -> LaunchCounter:
    """The launches of one prefill pass of `prompts` prompts of different lengths into slots
    0..prompts-1 of `eng` (a meta_engine), its layer passes labelled "talker_layers"."""
    config = eng.config
    speaker = 0 if config.uses_speaker else None
    fills = []
    for i in range(prompts):  # lengths differ, so the group is padded
        tokens = PromptTokens([0] * (COUNT_PROMPT - i % 8), None, [0] * 4, speaker)
        prompt = embed_prompt(eng.talker, config, tokens)
        fills.append(_count_fill(i, prompt))
    counter = LaunchCounter()
    if eng.talker_prefill is not None:  # the fused stack's layer passes
        passes = [(eng.talker_prefill.__self__, "prefill_layer")]
    else:  # the module path's layers
        passes = [(layer, "forward") for layer in eng.talker.model.layers]
    for owner, name in passes:  # an instance attribute shadows the method while counting
        setattr(owner, name, _labelled(counter, "talker_layers", getattr(owner, name)))
    try:
        with counter, torch.no_grad():
            eng.prefill(fills)
    finally:
        for owner, name in passes:
            delattr(owner, name)
    return counter


def prefill_launches(model: str | ModelConfig, prompts: int, tuning=None) -> dict:
    """{"prefill_launches_per_layer_pass": n, "prefill_launches": total, ...} for one prefill
    pass of `prompts` padded prompts on the GPU's path (or `tuning`')."""
    eng = meta_engine(model, prompts, tuning)
    counter = count_prefill(eng, prompts)
    layers = len(eng.talker.model.layers)
    per_pass, rest = divmod(counter.by_phase["talker_layers"], layers)
    if rest:
        raise AssertionError("layer passes launched different counts")
    return {
        "prefill_prompts": prompts,
        "prefill_launches": counter.total,
        "prefill_launches_per_layer_pass": per_pass,
        "prefill_phases": {p: counter.by_phase.get(p, 0) for p in PREFILL_PHASES},
    }


def _labelled(counter: LaunchCounter, name: str, step):
    def run(*args, **kwargs):
        with counter.phase(name):
            return step(*args, **kwargs)

    return run


def _count_fill(slot: int, prompt) -> SlotFill:
    """A slot fill of the launch counts: 64 frames, seeded by its slot."""
    return SlotFill(slot=slot, prompt=prompt, budget=64, seed=slot)
