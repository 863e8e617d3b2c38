"""Greedy decodes of a random model through one engine configuration: what the agreement checks
compare (layer paths, graph replay vs eager, bf16 vs fp32). Models come from `qtts bench`'s
random_models and shapes from the memory plan `qtts batch` makes, so the engines are the ones a
job builds. EOS is suppressed: every row runs its full budget, whatever random weights prefer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from qtts.core.bench.throughput import TEXT_LEN, synthetic_tokens
from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.loop.scheduler import EngineRequest
from qtts.core.model.config import SamplingParams
from qtts.core.synthesis.engine_driver import EngineDriver, EnginePass, EngineShape
from qtts.core.synthesis.memory_plan import plan_rows
from qtts.core.synthesis.prompt import embed_prompt

GREEDY = SamplingParams(  # the checkpoints' defaults, argmax
    do_sample=False, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05
)
AUDIO_CODES = 2048  # talker ids past these are control tokens, suppressed while decoding


@dataclass(frozen=True)
class Workload:
    rows: int
    slots: int  # fewer slots than rows: refills happen mid-decode
    frames: int  # frames per row


@contextmanager
def exact_fp32() -> Iterator[None]:
    """fp32 means fp32 for a comparison (no TF32 matmuls), restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@contextmanager
def few_threads(device: torch.device) -> Iterator[None]:
    """One intra-op thread for a CPU comparison, restored after: its ops are tiny, and on a busy
    machine OpenMP threads spin-waiting on each other make them tens of times slower."""
    saved = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _tokens(config, rows: int) -> list:
    return [synthetic_tokens(i, config.talker.text_vocab_size, TEXT_LEN) for i in range(rows)]


def prompts(config, model, rows: int) -> list:
    return [embed_prompt(model.talker, config, t) for t in _tokens(config, rows)]


def build(models, device: torch.device, tuning: EngineTuning, work: Workload) -> EnginePass:
    """An engine pass for `work`, shaped by the memory plan for these tuning; EOS suppressed."""
    config, model, decoder = models
    plan = plan_rows(
        config,
        model,
        decoder,
        budgets=[work.frames + 1] * work.rows,
        tokens=_tokens(config, work.rows),
        device=device,
        tuning=tuning,
        batch_size=work.slots,
    )
    (group,) = plan.groups  # every row has the same shape
    driver = EngineDriver(model, config, device, tuning)  # a capture that fails raises
    return driver.build(EngineShape.of(group), talker=GREEDY, subtalker=GREEDY, fixed_length=True)


def greedy_codes(models, device, tuning: EngineTuning, work: Workload) -> list[torch.Tensor]:
    """Each row's int64 [frames, 16] codes (CPU), by continuous batching over work.slots."""
    config, model, _ = models
    engine_requests = [
        EngineRequest(key=i, prompt=p, budget=work.frames + 1, seed=i)
        for i, p in enumerate(prompts(config, model, work.rows))
    ]
    codes: dict[int, torch.Tensor] = {}
    for done in build(models, device, tuning, work).run(engine_requests):
        for d in done:
            codes[d.key] = d.codes.cpu()
    if sorted(codes) != list(range(work.rows)):
        raise RuntimeError(f"rows came back as {sorted(codes)}, not 0..{work.rows - 1}")
    return [codes[i] for i in range(work.rows)]


def first_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> str | None:
    """None when every row's codes are equal; else where the first row differs."""
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x.shape != y.shape:
            return f"row {i}: {tuple(x.shape)} vs {tuple(y.shape)} codes"
        if not torch.equal(x, y):
            frame, book = (x != y).nonzero()[0].tolist()
            return f"row {i} differs first at frame {frame}, codebook {book}"
    return None
