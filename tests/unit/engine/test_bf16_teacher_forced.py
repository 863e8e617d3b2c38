"""bf16 against fp32 through the engine, teacher-forced (tests/teacher_forcing.py): both see the
same tokens at every step, so each site's logits are compared on identical inputs. On CPU with a
small model, each in its dtype's CPU default (bf16: the fused stack's twins; the GPU twin is
tests/gpu/test_engine_gpu.py); catches a wrong cast or a lost fp32 logit, which a free-running
comparison would drown in divergence."""

import engines
import pytest
import torch
from teacher_forcing import agreement, forced_logits
from tiny_models import as_loaded_in_bf16, tiny_model

from qtts.core.engine.step.fused_stack import FusedStack

# bf16 keeps 8 significant bits (relative rounding 2^-9); through a few layers of sums and
# norms logits move by ~1% of their range (seen 1.1% talker, 1.7% predictor here). A cast in the
# wrong place or fp32 logits lost shows as tens of percent and broken argmaxes.
LOGIT_REL_TOL = 0.05
MIN_ARGMAX_AGREEMENT = 0.95  # seen 1.0 (talker) and 0.989 (predictor) over ~1,700 sites


@pytest.fixture(scope="module")
def model64(tmp_path_factory):
    """Talker width 64, 4 query heads over 2 KV heads: wide enough for bf16 sums to matter."""
    return tiny_model(tmp_path_factory, talker_hidden=64, heads=4, kv_heads=2)


def test_bf16_tracks_fp32_teacher_forced(model64, monkeypatch):
    config, model, tok = model64
    bf16 = (config, as_loaded_in_bf16(model), tok)
    n = 4
    sizes = dict(max_len=160, max_frames=64)
    prompts = engines.prompts(model64)[:n]
    free = engines.run_codes(engines.engine(model64, n, True, **sizes),
                             engines.engine_requests(prompts, budget0=24))  # fmt: skip
    codes = [free[i] for i in range(n)]  # the fp32 free-running decode: the forced tokens
    fp32_logits = forced_logits(engines.engine(model64, n, True, **sizes), prompts, codes,
                                monkeypatch)  # fmt: skip
    eng16 = engines.engine(bf16, n, True, dtype=torch.bfloat16, **sizes)
    assert isinstance(eng16.talker_step, FusedStack)  # what a CPU runs in bf16
    bf16_logits = forced_logits(eng16, engines.prompts(bf16)[:n], codes, monkeypatch)
    audio_codes = 2048  # talker ids past these are control tokens, suppressed while decoding
    for sites in (range(0, 1), range(1, 16)):  # talker c0, then the 15 predictor codebooks
        same, worst, count = agreement(fp32_logits, bf16_logits, sites, audio_codes)
        assert count >= n * 23 * len(sites)
        assert worst <= LOGIT_REL_TOL, (sites, worst)
        assert same >= MIN_ARGMAX_AGREEMENT, (sites, same)
