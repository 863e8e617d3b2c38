"""The decode loop's stream on a GPU: of a higher priority than the vocoder's and the default
stream, and what it produces is ready on the caller's stream when an item is handed over (the
caller's stream waits for it on the device, no host sync). The CPU twin of the hand-over order is
tests/unit/synthesis/test_decode_overlap.py (fake streams)."""

import pytest
import torch

from qtts.core.synthesis.decode_overlap import decode_stream, prioritized

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_the_decode_stream_outranks_the_default_and_a_plain_stream():
    dev = torch.device("cuda")
    stream = decode_stream(dev)
    assert stream.priority < torch.cuda.current_stream(dev).priority  # lower numbers win
    assert stream.priority < torch.cuda.Stream(dev).priority


def test_items_made_on_the_decode_stream_are_ready_on_the_callers_stream():
    dev = torch.device("cuda")
    stream = decode_stream(dev)
    big = torch.randn(4096, 4096, device=dev)

    def produce():
        for i in range(3):
            assert torch.cuda.current_stream(dev) == stream
            x = big
            for _ in range(8):  # long enough that an unsynchronized read would see stale data
                x = x @ big / 64.0
            out = torch.full((1,), float(i), device=dev) + 0 * x.sum()
            yield out

    for i, item in enumerate(prioritized(produce(), stream)):
        assert torch.cuda.current_stream(dev) != stream
        copied = item.clone()  # on the caller's stream, after its wait
        assert copied.item() == float(i)
