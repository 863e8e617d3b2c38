"""Grouped decode attention (the GPU path) vs the repeated-K/V path, and layout independence.

CUDA's flash and memory-efficient SDPA kernels return [B, H, T, D] laid out as [B, T, H, D] (a
transposed, non-contiguous tensor); CPU SDPA returns it contiguous, so CPU tests alone never see
that layout. `sdpa_bthd` (conftest.py) makes CPU SDPA return exactly that layout, and everything
that calls SDPA (grouped decode attention, prefill and decode through the model, the codec
transformer) must give the same numbers with it.
"""

import engines
import pytest
import torch
import torch.nn.functional as F

from qtts.core.engine.step.decode_attention import attend_grouped
from qtts.core.model.talker import repeat_kv


def _qkv(b=3, hk=2, rep=4, s=9, d=8):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, hk * rep, 1, d, generator=g)
    k, v = torch.randn(b, hk, s, d, generator=g), torch.randn(b, hk, s, d, generator=g)
    lengths = torch.tensor([3, 9, 5])
    mask = (torch.arange(s)[None] < lengths[:, None])[:, None, None]  # [B, 1, 1, S]
    want = F.scaled_dot_product_attention(q, repeat_kv(k, rep), repeat_kv(v, rep), attn_mask=mask,
                                          scale=0.3)  # fmt: skip
    return (q, k, v, mask, rep), want


def test_grouped_decode_attention_equals_repeated_kv():
    """Per-slot mask included, several KV heads (the real models have 8)."""
    (q, k, v, mask, rep), want = _qkv()
    torch.testing.assert_close(attend_grouped(q, k, v, mask, 0.3, rep), want)


def test_grouped_decode_attention_with_the_cuda_output_layout(sdpa_bthd):
    (q, k, v, mask, rep), want = _qkv()
    got = attend_grouped(q, k, v, mask, 0.3, rep)  # a .view on SDPA's output raises here
    assert sdpa_bthd, "the patched SDPA was not called"
    torch.testing.assert_close(got, want)


def _codes(tiny, greedy, tuning):
    prompts = engines.prompts(tiny)
    eng = engines.engine(tiny, 3, greedy, tuning)
    return engines.run_codes(eng, engines.engine_requests(prompts))


@pytest.mark.parametrize("greedy", [True, False])
def test_engine_codes_with_the_cuda_layout_and_gpu_attention(tiny_gqa, sdpa_bthd, greedy):
    """The GPU engine's attention choices (grouped decode attention, grouped padded prefill) on
    CPU with CUDA's SDPA layout give the CPU path's codes, with several KV heads."""
    gpu_like = engines.cpu_tuning(grouped_attention=True, prefill_group=3)
    got = _codes(tiny_gqa, greedy, gpu_like)
    assert any(shape[2] > 1 and shape[1] == 2 for shape in sdpa_bthd), "no grouped call"
    want = _codes(tiny_gqa, greedy, engines.cpu_tuning())
    assert sorted(got) == sorted(want) == list(range(len(engines.TEXTS)))
    for key in want:
        assert torch.equal(got[key], want[key]), key


@pytest.fixture
def codec():
    """A small random speech decoder, codes for two utterances and their audio (plain SDPA)."""
    from qtts.core.model.codec import SpeechDecoder, decode_utterances
    from qtts.core.model.sizes import decoder_config

    torch.manual_seed(0)
    decoder = SpeechDecoder(decoder_config("small")).eval()
    codes = [torch.randint(0, 2048, (n, 16)) for n in (7, 3)]
    return decoder, codes, decode_utterances(decoder, codes)


def test_codec_decoder_with_the_cuda_layout(codec, sdpa_bthd):
    from qtts.core.model.codec import decode_utterances

    decoder, codes, want = codec
    got = decode_utterances(decoder, codes)
    assert sdpa_bthd
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
