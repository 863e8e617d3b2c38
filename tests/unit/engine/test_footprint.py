"""The planner's byte counts (qtts.core.engine.plan.footprint) against what the code allocates:
exact for the slot state, upper bounds within a factor for the transient working sets, measured with
a live-bytes tracker (tests/live_bytes.py) on CPU tensors and, at the real 0.6B/1.7B dimensions,
on the meta device."""

from dataclasses import replace

import engines
import pytest
import torch
import torch.nn.functional as F
from live_bytes import LiveBytes

from qtts.core.engine.plan.footprint import (
    Dims,
    prefill_activation_bytes,
    slot_state_bytes,
    step_activation_bytes,
    vocoder_bytes,
)
from qtts.core.engine.step.slots import SlotFill, SlotState
from qtts.core.model.codec import SpeechDecoder, decode_utterances
from qtts.core.model.sizes import decoder_config, model_config
from qtts.core.model.talker import build_model

BOUND_FACTOR = 2.0  # an upper bound must not overstate by more than this (planning stays useful)


def _tensors(obj, seen=None):
    """Every tensor reachable from a SlotState (its caches and RowParams included), once."""
    seen = set() if seen is None else seen
    for value in vars(obj).values():
        if isinstance(value, torch.Tensor) and id(value) not in seen:
            seen.add(id(value))
            yield value
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            yield from _tensors(value, seen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_slot_state_bytes_are_exact(tiny_gqa, dtype):
    config = tiny_gqa[0]
    dims = Dims.of(config, decoder_config("small"), dtype.itemsize, 4)
    p = engines.sampling(False)
    state = SlotState(config, 5, 77, 31, 4, talker=p, subtalker=p, dtype=dtype, device="cpu")
    allocated = sum(t.nbytes for t in _tensors(state))
    assert allocated == slot_state_bytes(dims, 5, 77, 31, 4)


def _bound(estimate: int, measured: int) -> None:
    assert measured <= estimate <= BOUND_FACTOR * measured, (estimate, measured)


@pytest.mark.parametrize("grouped", [False, True], ids=["cpu-repeat-kv", "grouped"])
def test_decode_step_bound_on_cpu(tiny_gqa, grouped):
    config = tiny_gqa[0]
    tuning = engines.cpu_tuning(grouped_attention=grouped, allow_host_sync=False)
    eng = engines.engine(tiny_gqa, 6, False, tuning, max_len=256, max_frames=32)
    eng.state.finished.fill_(False)  # every slot computes
    dims = Dims.of(config, decoder_config("small"), 4, 4)
    for view in (64, 256):
        with LiveBytes() as live:
            eng.decode_step(view)
        _bound(step_activation_bytes(dims, 6, view, repeats_kv=not grouped), live.peak)


def _real(size):
    config = model_config(size)
    with torch.device("meta"):
        model, decoder = build_model(config), SpeechDecoder(decoder_config(size))
    model = model.to(device="meta", dtype=torch.bfloat16).eval()
    decoder = decoder.to(device="meta", dtype=torch.bfloat16).eval()
    return config, model, decoder, Dims.of(config, decoder_config(size), 2, 2)


@pytest.fixture
def fused_sdpa(monkeypatch):
    """What a fused CUDA attention kernel allocates: its output only (meta's SDPA decomposes)."""
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda q, *a, **k: torch.empty_like(q))


@pytest.mark.parametrize("size", ["0.6b", "1.7b"])
def test_gpu_working_sets_bound_at_real_dimensions(size, fused_sdpa):
    """On the module path (the fused stack's twin), the larger of the two: the bound is tight."""
    from qtts.core.bench.throughput import synthetic_tokens
    from qtts.core.engine.loop.engine import Engine
    from qtts.core.synthesis.prompt import embed_prompt, pad_embedding

    config, model, decoder, dims = _real(size)
    tuning = engines.gpu_path_tuning("module")
    p = engines.sampling(False)
    state = SlotState(config, 8, 1024, 64, 1, talker=p, subtalker=p, dtype=torch.bfloat16,
                      device="meta")  # fmt: skip
    eng = Engine(model, config, state, pad_embedding(model.talker, config), tuning)
    with LiveBytes() as live:
        eng.decode_step(1024)
    _bound(step_activation_bytes(dims, 8, 1024, repeats_kv=False, kernel_sampler=True), live.peak)
    prompts = [embed_prompt(model.talker, config, synthetic_tokens(i, 1000, 180)) for i in range(4)]
    fills = [SlotFill(i, pr, 64, i) for i, pr in enumerate(prompts)]
    with LiveBytes() as live:
        eng.prefill(fills)
    width = max(pr.embeds.shape[0] for pr in prompts)
    _bound(prefill_activation_bytes(dims, 4, width, fused=False, kernel_sampler=True), live.peak)


def _prefill_peak(eng, prompts) -> int:
    """Peak live bytes of one prefill pass of `prompts` into slots 0..m-1 of `eng`."""
    fills = [SlotFill(i, pr, 8, i) for i, pr in enumerate(prompts)]
    with LiveBytes() as live:
        eng.prefill(fills)
    return live.peak


@pytest.mark.parametrize("size", ["0.6b", "1.7b"])
def test_fused_prefill_bound_at_real_dimensions(size):
    """The GPU's prefill: 64 padded prompts through the fused ops, bias and all. The bound is
    what the planner counts for the pass (GroupPlan.prefill_bytes)."""
    from qtts.core.bench.throughput import synthetic_tokens
    from qtts.core.engine.loop.engine import Engine
    from qtts.core.synthesis.prompt import embed_prompt, pad_embedding

    config, model, _, dims = _real(size)
    p = engines.sampling(False)
    state = SlotState(config, 64, 1024, 64, 1, talker=p, subtalker=p, dtype=torch.bfloat16,
                      device="meta")  # fmt: skip
    eng = Engine(model, config, state, pad_embedding(model.talker, config), engines.gpu_tuning())
    prompts = [embed_prompt(model.talker, config, synthetic_tokens(i, 1000, 100 + i))
               for i in range(64)]  # fmt: skip
    width = max(pr.embeds.shape[0] for pr in prompts)
    bound = prefill_activation_bytes(dims, 64, width, fused=True, kernel_sampler=True)
    _bound(bound, _prefill_peak(eng, prompts))


def test_fused_prefill_bound_on_cpu(tiny_gqa):
    """The same pass on CPU in fp32 (the ops' torch twins), where the attention half is the
    larger one."""
    config = tiny_gqa[0]
    eng = engines.engine(tiny_gqa, 6, False, engines.gpu_tuning())
    prompts = engines.prompts(tiny_gqa)
    width = max(pr.embeds.shape[0] for pr in prompts)
    dims = Dims.of(config, decoder_config("small"), 4, 4)
    _bound(prefill_activation_bytes(dims, 6, width, fused=True), _prefill_peak(eng, prompts))


def test_the_fused_step_stays_within_the_module_paths_bound(fused_sdpa):
    """The GPU's fused step keeps fewer intermediates alive than the module path: the planner's
    bound (sized for the module path) still holds for it, with room to spare."""
    from qtts.core.engine.loop.engine import Engine
    from qtts.core.synthesis.prompt import pad_embedding

    config, model, _, dims = _real("0.6b")
    p = engines.sampling(False)
    state = SlotState(config, 8, 1024, 64, 1, talker=p, subtalker=p, dtype=torch.bfloat16,
                      device="meta")  # fmt: skip
    eng = Engine(model, config, state, pad_embedding(model.talker, config), engines.gpu_tuning())
    with LiveBytes() as live:
        eng.decode_step(1024)
    assert 0 < live.peak <= step_activation_bytes(dims, 8, 1024, False, kernel_sampler=True)


@pytest.mark.parametrize("frames", [325, 700])
def test_vocoder_bound_at_real_dimensions(frames):
    *_, decoder, dims = _real("1.7b")
    codes = [torch.zeros(frames, 16, dtype=torch.long, device="meta") for _ in range(3)]
    with LiveBytes() as live:
        decode_utterances(decoder, codes)
    _bound(vocoder_bytes(dims, 3, frames), live.peak)


def test_vocoder_bound_on_cpu_in_fp32():
    from qtts.core.model.sizes import decoder_config as small_decoder

    torch.manual_seed(0)
    decoder = SpeechDecoder(small_decoder("small")).eval()
    dims = replace(Dims.of(model_config("small"), small_decoder("small"), 4, 4))
    codes = [torch.randint(0, 2048, (n, 16)) for n in (40, 25)]
    with LiveBytes() as live:
        decode_utterances(decoder, codes)
    _bound(vocoder_bytes(dims, 2, 40), live.peak)
