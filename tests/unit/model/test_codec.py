"""Unit tests for the speech-tokenizer decoder (qtts.core.model.codec*) on a tiny random model."""

from __future__ import annotations

import pytest
import torch
from tiny_models import TINY_DECODER, tiny_decoder

from qtts.core.model.codec import SpeechDecoder, SpeechDecoderConfig, decode_utterances
from qtts.core.model.codec_modules import Codebook
from qtts.core.model.codec_transformer import CodecTransformer

UP = 1920  # samples per frame (8 * 5 * 4 * 3 * 2 * 2)
Q = 16
# bfloat16 weights against float32 ones on the tiny decoder: about 25 dB measured (an 8-bit
# mantissa through the conv stack); silence is 0 dB, half the amplitude 6 dB.
BF16_MIN_SNR_DB = 20.0


def snr_db(audio: torch.Tensor, reference: torch.Tensor) -> float:
    """The reference's power over the error's, in dB."""
    error = (audio.double() - reference.double()).pow(2).sum()
    return float(10 * torch.log10(reference.double().pow(2).sum() / error))


REAL_DECODER_CONFIG = {  # the published speech_tokenizer/config.json decoder_config
    "codebook_size": 2048,
    "codebook_dim": 512,
    "hidden_size": 512,
    "latent_dim": 1024,
    "head_dim": 64,
    "intermediate_size": 1024,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 8,
    "num_quantizers": 16,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000,
    "sliding_window": 72,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "decoder_dim": 1536,
}


def _config(decoder: dict, **top) -> dict:
    return {"model_type": "qwen3_tts_tokenizer_12hz", "decoder_config": dict(decoder), **top}


@pytest.fixture(scope="module")
def tiny() -> SpeechDecoder:
    return tiny_decoder(seed=0)  # lively weights: the default init has zero codebooks


def _codes(frames: int, seed: int) -> torch.Tensor:  # [T, Q]
    return torch.randint(0, 64, (frames, Q), generator=torch.Generator().manual_seed(seed))


def _forward(model: SpeechDecoder, codes: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(codes.T[None])[0]  # [T * UP]


def test_config_reads_the_published_layout():
    cfg = SpeechDecoderConfig.from_dict(
        _config(REAL_DECODER_CONFIG, output_sample_rate=24000, decode_upsample_rate=1920)
    )
    assert (cfg.sample_rate, cfg.upsample, cfg.num_quantizers) == (24000, 1920, 16)
    assert cfg.transformer.head_dim == 64 and cfg.transformer.sliding_window == 72
    nested = dict(REAL_DECODER_CONFIG, rope_parameters={"rope_theta": 5000.0})
    del nested["rope_theta"]
    assert SpeechDecoderConfig.from_dict(_config(nested)).transformer.rope_theta == 5000.0


def test_config_errors_name_the_problem():
    with pytest.raises(ValueError, match="decoder_config"):
        SpeechDecoderConfig.from_dict({"model_type": "qwen3_tts_tokenizer_12hz"})
    no_dim = {k: v for k, v in REAL_DECODER_CONFIG.items() if k != "codebook_dim"}
    with pytest.raises(ValueError, match="codebook_dim"):
        SpeechDecoderConfig.from_dict(_config(no_dim))
    with pytest.raises(ValueError, match="decode_upsample_rate"):
        SpeechDecoderConfig.from_dict(_config(REAL_DECODER_CONFIG, decode_upsample_rate=960))


def test_real_sized_module_has_checkpoint_names_and_shapes():
    cfg = SpeechDecoderConfig.from_dict(_config(REAL_DECODER_CONFIG))
    with torch.device("meta"):  # shapes only, no memory
        model = SpeechDecoder(cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    expected = {
        "quantizer.rvq_first.vq.layers.0._codebook.embedding_sum": (2048, 256),
        "quantizer.rvq_rest.vq.layers.14._codebook.cluster_usage": (2048,),
        "quantizer.rvq_rest.input_proj.weight": (256, 512, 1),
        "quantizer.rvq_rest.output_proj.weight": (512, 256, 1),
        "pre_conv.conv.weight": (1024, 512, 3),
        "pre_transformer.input_proj.weight": (512, 1024),
        "pre_transformer.layers.7.self_attn.q_proj.weight": (1024, 512),
        "pre_transformer.layers.7.self_attn_layer_scale.scale": (512,),
        "pre_transformer.norm.weight": (512,),
        "upsample.1.0.conv.weight": (1024, 1024, 2),
        "upsample.1.1.pwconv1.weight": (4096, 1024),
        "upsample.1.1.gamma": (1024,),
        "decoder.0.conv.weight": (1536, 1024, 7),
        "decoder.1.block.1.conv.weight": (1536, 768, 16),
        "decoder.4.block.4.conv1.conv.weight": (96, 96, 7),
        "decoder.5.beta": (96,),
        "decoder.6.conv.weight": (1, 96, 7),
    }
    assert {k: shapes.get(k) for k in expected} == expected
    assert not any("inv_freq" in k for k in shapes)  # derived from config, not in the checkpoint
    assert len(shapes) == 271


def test_forward_shape_range_and_clamp(tiny):
    codes = torch.stack([_codes(5, 1).T, _codes(5, 2).T])  # [2, Q, 5]
    with torch.inference_mode():
        audio = tiny(codes)
    assert audio.shape == (2, 5 * UP) and audio.dtype == torch.float32
    assert audio.abs().max() <= 1.0 and audio.std() > 1e-3
    last = tiny.decoder[-1].conv
    saved = last.bias.detach().clone()
    with torch.no_grad():
        last.bias.fill_(50.0)
        try:
            assert torch.equal(tiny(codes), torch.ones(2, 5 * UP))
        finally:
            last.bias.copy_(saved)


def test_forward_rejects_wrong_codebook_count(tiny):
    with pytest.raises(ValueError, match="16"):
        tiny(torch.zeros(1, 8, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="codes\\[1\\]"):
        decode_utterances(tiny, [_codes(3, 0), torch.zeros(3, 8, dtype=torch.long)])


def test_codebook_normalises_by_clamped_usage():
    book = Codebook(size=3, dim=2)
    with torch.no_grad():
        book.embedding_sum.copy_(torch.tensor([[2.0, 4.0], [1.0, 1.0], [3e-5, 0.0]]))
        book.cluster_usage.copy_(torch.tensor([2.0, 0.5, 0.0]))
    got = book.lookup(torch.tensor([[0, 1, 2]]))
    assert torch.allclose(got, torch.tensor([[[1.0, 2.0], [2.0, 2.0], [3.0, 0.0]]]))


def test_attention_window_covers_exactly_window_keys():
    cfg = SpeechDecoderConfig.from_dict(_config(TINY_DECODER))
    torch.manual_seed(1)
    block = CodecTransformer(cfg.transformer).eval()  # one layer, window 6
    x = torch.randn(1, 20, 8)  # [B, T, latent]
    y = x.clone()
    y[0, 5] += 1.0
    with torch.inference_mode():
        diff = (block(x) - block(y)).abs().amax(-1)[0]  # [T]
    assert torch.all(diff[:5] == 0)  # causal
    assert torch.all(diff[5:11] > 0)  # queries 5..10 see key 5 (6 keys each, self included)
    assert torch.all(diff[11:] == 0)  # query 11 sees keys 6..11 only


def test_appending_frames_leaves_earlier_audio_unchanged(tiny):
    codes = _codes(17, 3)
    short = decode_utterances(tiny, [codes[:11]], chunk_size=6, left_context=2)[0]
    longer = decode_utterances(tiny, [codes], chunk_size=6, left_context=2)[0]
    assert short.shape == (11 * UP,) and longer.shape == (17 * UP,)
    torch.testing.assert_close(longer[: 11 * UP], short, rtol=0, atol=1e-6)
    assert not torch.equal(longer[11 * UP :], torch.zeros(6 * UP))


def test_short_utterance_is_one_plain_forward(tiny):
    codes = _codes(9, 4)
    assert torch.equal(decode_utterances(tiny, [codes])[0], _forward(tiny, codes))


def test_chunks_restart_with_left_context_that_is_dropped(tiny):
    codes = _codes(20, 5)
    # chunk 6, context 2: frames [0,6), then [4,12) keep 6..12, [10,18) keep 12..18, [16,20).
    expected = torch.cat(
        [
            _forward(tiny, codes[0:6]),
            _forward(tiny, codes[4:12])[2 * UP :],
            _forward(tiny, codes[10:18])[2 * UP :],
            _forward(tiny, codes[16:20])[2 * UP :],
        ]
    )
    got = decode_utterances(tiny, [codes], chunk_size=6, left_context=2)[0]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    # and the chunking is real: one long forward gives different audio after frame 6
    assert not torch.allclose(got, _forward(tiny, codes), atol=1e-4)


def test_batch_equals_single_and_pads_harmlessly(tiny):
    lengths = (13, 1, 7, 13, 0)
    codes = [_codes(n, 10 + i) for i, n in enumerate(lengths)]
    batched = decode_utterances(tiny, codes, chunk_size=5, left_context=2)
    assert [a.shape[0] for a in batched] == [n * UP for n in lengths]
    for c, a in zip(codes, batched, strict=True):
        alone = decode_utterances(tiny, [c], chunk_size=5, left_context=2)[0]
        torch.testing.assert_close(a, alone, rtol=0, atol=1e-6)


def test_negative_codes_decode_as_zero_like_the_official_padding(tiny):
    codes = _codes(4, 6)
    holed = codes.clone()
    holed[1:3, 2] = -1
    zeroed = codes.clone()
    zeroed[1:3, 2] = 0
    assert torch.equal(decode_utterances(tiny, [holed])[0], decode_utterances(tiny, [zeroed])[0])


def test_chunk_arguments_are_validated(tiny):
    assert decode_utterances(tiny, []) == []
    with pytest.raises(ValueError, match="chunk_size"):
        decode_utterances(tiny, [_codes(3, 0)], chunk_size=0)


def test_bfloat16_weights_give_float32_audio(tiny):
    model = SpeechDecoder(tiny.cfg).eval()
    model.load_state_dict(tiny.state_dict())
    model.to(torch.bfloat16)
    codes = _codes(6, 7)
    audio = decode_utterances(model, [codes])[0]
    assert audio.dtype == torch.float32
    assert snr_db(audio, _forward(tiny, codes)) >= BF16_MIN_SNR_DB


def test_the_bfloat16_check_fails_on_silence_and_noise(tiny):
    """The tolerance is scaled to the signal (the tiny decoder's audio peaks near 0.08, so a
    fixed atol of 0.1 would pass silence): silence or a sign flip is far below it."""
    reference = _forward(tiny, _codes(6, 7))
    assert snr_db(torch.zeros_like(reference), reference) < BF16_MIN_SNR_DB
    assert snr_db(-reference, reference) < BF16_MIN_SNR_DB
    assert snr_db(reference * 0.5, reference) < BF16_MIN_SNR_DB
