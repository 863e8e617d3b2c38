"""The vocoder's stream (decode_overlap.vocoder_stream) on CPU, with torch's CUDA stream and green
context stand-ins: QTTS_VOCODER_SMS gives a green context's stream of that many SMs, kept alive;
where torch cannot make one (no support, an older API) the job goes on with a plain stream and
one warning. Whether the split pays is a GPU measurement (tools/gpu_checks.sh overlap)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.cuda import green_contexts

from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.synthesis import decode_overlap

DEVICE = torch.device("cuda", 0)


@pytest.fixture
def plain(monkeypatch):
    made = []
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: made.append(device) or "plain")
    return made


class FakeGreen:
    created: list = []

    def __init__(self, sms):
        self.sms = sms

    @classmethod
    def create(cls, *, num_sms, device_id):
        cls.created.append((num_sms, device_id))
        return cls(num_sms)

    def Stream(self):  # noqa: N802 -- torch's name
        return f"green {self.sms}"


def test_off_is_a_plain_stream(plain):
    assert decode_overlap.vocoder_stream(DEVICE) == "plain"
    assert decode_overlap.vocoder_stream(DEVICE, None) == "plain" and plain == [DEVICE] * 2


def test_a_green_context_of_that_many_sms_is_made_and_kept(plain, monkeypatch):
    monkeypatch.setattr(green_contexts, "SUPPORTED", True)
    monkeypatch.setattr(green_contexts, "GreenContext", FakeGreen)
    monkeypatch.setattr(decode_overlap, "_green_streams", {})
    FakeGreen.created = []
    assert decode_overlap.vocoder_stream(DEVICE, 66) == "green 66"
    assert FakeGreen.created == [(66, 0)] and plain == []
    context, stream = decode_overlap._green_streams[0, 66]  # the context outlives its stream
    assert context.sms == 66 and stream == "green 66"
    # one context per split for the process: a bench's next run gets the same stream
    assert decode_overlap.vocoder_stream(DEVICE, 66) == "green 66"
    assert decode_overlap.vocoder_stream(DEVICE, 33) == "green 33"
    assert FakeGreen.created == [(66, 0), (33, 0)]


def test_the_vocoder_graphs_are_captured_on_the_split_stream(monkeypatch):
    """A graph's kernels keep the context of the stream they were captured on, so a green
    context's limit holds in replay only for graphs captured on its stream: the vocoder hands
    the driver's vocoder stream to its graphs when the SMs are split, and nothing otherwise."""
    from types import SimpleNamespace

    from qtts.core.synthesis import vocoding

    monkeypatch.setattr(vocoding, "with_kernels", lambda decoder, gemm, choices: decoder)

    def capture_stream(sms, stream):
        tuning = SimpleNamespace(decoder_gemm=True, vocoder_sms=sms, cuda_graphs=True,
                                 vocoder_graph_max=None, decoder_conv_choices=None)  # fmt: skip
        driver = SimpleNamespace(device=DEVICE, tuning=tuning, vocoder_stream=stream)
        return vocoding.Vocoding(object(), driver, rows=2).graphed.capture_stream

    assert capture_stream(66, "green 66") == "green 66"
    assert capture_stream(None, "plain") is None


@pytest.mark.parametrize("why", ["unsupported", "no Stream()"])
def test_without_green_contexts_the_job_goes_on_with_a_plain_stream(plain, monkeypatch, caplog,
                                                                    why):  # fmt: skip
    class Older:  # an API without Stream(): contexts set current instead
        @classmethod
        def create(cls, *, num_sms, device_id):
            return cls()

    monkeypatch.setattr(green_contexts, "SUPPORTED", why != "unsupported")
    monkeypatch.setattr(green_contexts, "GreenContext", Older)
    with caplog.at_level(logging.WARNING, logger="qtts"):
        assert decode_overlap.vocoder_stream(DEVICE, 33) == "plain"
    assert "QTTS_VOCODER_SMS=33: no green context" in caplog.text


def test_the_knob_is_a_count_on_a_gpu_and_nothing_on_a_cpu():
    assert EngineTuning.for_device("cuda", env={}).vocoder_sms is None
    assert EngineTuning.for_device("cuda", env={"QTTS_VOCODER_SMS": "66"}).vocoder_sms == 66
    assert EngineTuning.for_device("cuda", env={"QTTS_VOCODER_SMS": "0"}).vocoder_sms is None
    assert EngineTuning.for_device("cpu", env={"QTTS_VOCODER_SMS": "66"}).vocoder_sms is None
    with pytest.raises(ValueError, match="QTTS_VOCODER_SMS must be a whole number of SMs"):
        EngineTuning.for_device("cuda", env={"QTTS_VOCODER_SMS": "half"})
