"""A dry run of the GPU path at the real 0.6B and 1.7B dimensions in bf16 on the meta device
(shapes and dtypes, no memory, no values): grouped padded prefill, grouped decode attention, decode
steps and one vocoder chunk are shape-correct. Also what a refill costs: one host-to-device copy
and the same ops whether it fills 2 slots or 6 (tests/op_log.py counts them).
"""

from collections import Counter

import engines
import pytest
import torch
from op_log import OpLog

from qtts.core.bench.throughput import synthetic_tokens
from qtts.core.engine.loop.engine import Engine
from qtts.core.engine.step.decode_attention import attend_grouped
from qtts.core.engine.step.slots import SlotFill, SlotState
from qtts.core.model.codec import SpeechDecoder, decode_utterances
from qtts.core.model.config import SamplingParams
from qtts.core.model.sizes import decoder_config, model_config
from qtts.core.model.talker import build_model
from qtts.core.synthesis.prompt import embed_prompt, pad_embedding

SLOTS, MAX_LEN, MAX_FRAMES = 8, 512, 96
PARAMS = SamplingParams(  # sampled: the full GPU sampler path
    do_sample=True, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05
)


@pytest.fixture(scope="module", params=["0.6b", "1.7b"])
def real(request):
    size = request.param
    config = model_config(size)
    with torch.device("meta"):
        model, decoder = build_model(config), SpeechDecoder(decoder_config(size))
    model = model.to(device="meta", dtype=torch.bfloat16).eval()
    decoder = decoder.to(device="meta", dtype=torch.bfloat16).eval()
    return size, config, model, decoder


def _engine(real, path: str = "fused"):
    _, config, model, _ = real
    state = SlotState(config, SLOTS, MAX_LEN, MAX_FRAMES, 1, talker=PARAMS, subtalker=PARAMS,
                      dtype=torch.bfloat16, device="meta")  # fmt: skip
    tuning = engines.gpu_path_tuning(path)
    return Engine(model, config, state, pad_embedding(model.talker, config), tuning)


def _fills(real, n: int, first_slot: int = 0) -> list[SlotFill]:
    _, config, model, _ = real
    vocab = config.talker.text_vocab_size
    prompts = [
        embed_prompt(model.talker, config, synthetic_tokens(i, vocab, 9 + 13 * i)) for i in range(n)
    ]
    return [SlotFill(first_slot + i, p, MAX_FRAMES, i) for i, p in enumerate(prompts)]


def test_gpu_path_is_shape_correct_at_real_dimensions(real):
    """The module path (the fused path's twin) with grouped decode attention; the fused path's
    own ops at these dimensions are the next test's."""
    size, config, _, decoder = real
    t = config.talker
    eng = _engine(real, "module")
    calls = []

    def spy(q, k, v, mask, scale, n_rep):
        calls.append((tuple(q.shape), tuple(k.shape), tuple(mask.shape)))
        return attend_grouped(q, k, v, mask, scale, n_rep)

    eng.decode_attend = spy
    fills = _fills(real, 5)  # prompts of 18 .. 70 positions, one padded pass
    eng.prefill(fills)
    s = eng.state
    assert s.kv.k.shape == (t.num_hidden_layers, SLOTS, 8, MAX_LEN, 128)
    assert s.kv.k.dtype == s.past_hidden.dtype == torch.bfloat16
    assert s.past_hidden.shape == (SLOTS, t.hidden_size) and s.c0.dtype == torch.int64
    with OpLog() as log:
        for _ in range(2):
            eng.decode_step(256)
    assert log.copies == [] and log.host_syncs() == []
    assert calls and all(c == ((SLOTS, 16, 1, 128), (SLOTS, 8, 256, 128), (SLOTS, 1, 1, 256))
                         for c in calls)  # fmt: skip
    assert len(calls) == 2 * t.num_hidden_layers  # every talker layer, grouped
    assert s.codes.shape == (SLOTS, MAX_FRAMES, 16) and s.codes.dtype == torch.int64
    audio = decode_utterances(decoder, [s.codes[0, :20], s.codes[1, :7]])  # one 300-frame chunk
    assert [a.shape for a in audio] == [(20 * 1920,), (7 * 1920,)]


def test_fused_path_is_shape_correct_at_real_dimensions(real):
    """The path the GPU runs: every layer pass of both stacks is the fused ops, once each per
    pass (28 talker layers + 5 predictor layers x 15 passes per frame), and the step writes the
    codes and lengths it should."""
    _, config, _, _ = real
    eng = _engine(real)
    eng.prefill(_fills(real, 5))
    with OpLog() as log:
        eng.decode_step(256)
    passes = config.talker.num_hidden_layers + 5 * 15
    counts = log.counts()
    for op in ("qk_norm_rope_cache", "decode_attention", "silu_mul"):
        assert counts[f"{op}.default"] == passes, op
    assert counts["rms_norm.default"] == 2 * passes + 16  # + each stack call's final norm
    assert counts["sample_tokens.default"] == 16  # one Triton launch per sampling site
    assert log.copies == [] and log.host_syncs() == []
    assert eng.state.codes.shape == (SLOTS, MAX_FRAMES, 16) and eng.state.codes.is_meta


def test_a_refill_costs_one_copy_and_the_same_ops_for_any_number_of_slots(real):
    logs = {}
    for m in (2, 6):
        eng = _engine(real)
        fills = _fills(real, m, first_slot=1)
        with OpLog() as log:
            eng.prefill(fills)
        logs[m] = log
    assert logs[2].copies == logs[6].copies == [("cpu", "meta")]  # the one packed table
    assert logs[2].host_syncs() == logs[6].host_syncs() == []
    assert Counter(logs[2].ops) == Counter(logs[6].ops)
