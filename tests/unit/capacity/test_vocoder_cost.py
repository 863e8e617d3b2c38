"""The vocoder's roofline share, counted on the meta device at the published dimensions."""

import pytest
import torch

from qtts.core.capacity.vocoder_cost import CHUNK_FRAMES, LEFT_CONTEXT, vocoder_cost
from qtts.core.engine.plan.roofline import DEVICES
from qtts.core.model.sizes import decoder_config

# FLOPs come from shapes alone (integers): the same on every machine. A change here is a change
# to the decoder's computation or to the window, and should be deliberate.
PUBLISHED_FLOPS_PER_AUDIO_S = 67_294_101_333


@pytest.mark.parametrize("size", ["0.6b", "1.7b"])  # both checkpoints share the speech decoder
def test_vocoder_flops_at_the_published_dims_are_pinned(size):
    cost = vocoder_cost(decoder_config(size), torch.bfloat16)
    assert int(cost.flops_per_audio_s) == PUBLISHED_FLOPS_PER_AUDIO_S
    # Without the window's left context (325 frames decoded for 300 kept): about 62 GFLOP per
    # audio-second, what a FLOP counter gives the published decoder on a whole row.
    whole_row = cost.flops_per_audio_s * CHUNK_FRAMES / (CHUNK_FRAMES + LEFT_CONTEXT)
    assert 60e9 < whole_row < 64e9


def test_bytes_count_activations_and_weights_shared_by_a_call():
    cost = vocoder_cost(decoder_config("0.6b"), torch.bfloat16)
    assert cost.weight_bytes == pytest.approx(228_646_274, rel=1e-6)  # ~114M params in bf16
    activations = cost.activation_bytes_per_audio_s
    assert cost.bytes_per_audio_s(1) > cost.bytes_per_audio_s(16) > activations
    fp32 = vocoder_cost(decoder_config("0.6b"), torch.float32)
    assert fp32.activation_bytes_per_audio_s == pytest.approx(
        2 * cost.activation_bytes_per_audio_s, rel=0.05
    )  # the same traffic in elements; the integer codes do not double


def test_the_vocoder_bound_is_the_larger_of_compute_and_memory():
    cost, h100 = vocoder_cost(decoder_config("0.6b"), torch.bfloat16), DEVICES["h100"]
    seconds = cost.seconds_per_audio_s(h100, 16)
    assert seconds == max(cost.flops_per_audio_s / h100.flops,
                          cost.bytes_per_audio_s(16) / h100.bandwidth)  # fmt: skip
