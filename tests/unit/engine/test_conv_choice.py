"""The speech decoder's convolutions timed on the card (core/engine/vocoder/conv_choice.py),
driven on CPU tensors (the ops are called directly; a CPU never installs them): both ways compute
the module's convolution, the faster way is kept and returned, the choice lands in the file and a
later process reads it instead of timing again, a capture never times, and the knob names the
file. Which way wins on a card is for a GPU run (tools/gpu_checks.sh)."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from tiny_models import tiny_decoder

from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.vocoder import conv_choice
from qtts.core.engine.vocoder.conv_choice import Choices, TimedConv, size_class, timed_conv
from qtts.core.engine.vocoder.decoder_kernels import frame_rate_convs, with_kernels
from qtts.core.model.codec_modules import CausalConv1d, CausalConvTranspose1d

# fp32 on a CPU: a product sums in another order than the convolution
WAYS_ATOL = 1e-5


def _fake_timing(monkeypatch, seconds: dict[str, float], timed: list) -> None:
    """Each way's timing reads `seconds` for the way it ran (TimedConv keeps its ways' names in
    `ways`; the fake runs the way once to learn which), and logs what it timed."""
    ran: list[str] = []
    real_init = TimedConv.__init__

    def init(self, ways, *args):
        real_init(
            self,
            {k: (lambda *a, k=k, f=f: (ran.append(k), f(*a))[1]) for k, f in ways.items()},
            *args,
        )

    def fake(run, device):
        run()
        timed.append(ran[-1])
        return seconds[ran[-1]]

    monkeypatch.setattr(TimedConv, "__init__", init)
    monkeypatch.setattr(conv_choice, "_time", fake)


@pytest.mark.parametrize("kind", ["conv", "transposed"])
def test_both_ways_compute_the_modules_convolution(kind):
    torch.manual_seed(0)
    if kind == "conv":
        module = CausalConv1d(6, 5, kernel=7, dilation=3)
        x = torch.nn.functional.pad(torch.randn(2, 6, 40), (module.left_pad, 0))
        want, arg = module.conv(x), module.conv.dilation[0]
    else:
        module = CausalConvTranspose1d(6, 5, kernel=8, stride=4)
        x = torch.randn(2, 6, 40)
        want, arg = module(x), module.conv.stride[0]
    op = timed_conv(module, Choices(Path_("unused")), fallback="cudnn")
    for way, run in op.ways.items():
        got = run(x, module.conv.weight, module.conv.bias, arg)
        torch.testing.assert_close(got, want, rtol=0, atol=WAYS_ATOL, msg=way)


def Path_(name):  # a path no test writes to
    from pathlib import Path

    return Path("/nonexistent-qtts-test") / name


def test_convolutions_a_product_cannot_compute_keep_cudnn():
    grouped = CausalConv1d(4, 4, kernel=7, groups=4)
    odd = CausalConvTranspose1d(4, 4, kernel=5, stride=2)  # kernel neither stride nor twice it
    assert timed_conv(grouped, Choices(Path_("c")), "cudnn") is None
    assert timed_conv(odd, Choices(Path_("c")), "cudnn") is None


def test_the_faster_way_is_kept_returned_and_read_back_by_a_later_process(tmp_path, monkeypatch):
    timed: list = []
    _fake_timing(monkeypatch, {"cudnn": 2.0, "product": 1.0}, timed)
    path = tmp_path / "choices.json"
    module = CausalConv1d(6, 5, kernel=3)
    x = torch.nn.functional.pad(torch.randn(2, 6, 32), (module.left_pad, 0))
    op = timed_conv(module, Choices(path), fallback="cudnn")
    got = op(x, module.conv.weight, module.conv.bias, 1)
    torch.testing.assert_close(got, module.conv(x), rtol=0, atol=WAYS_ATOL)
    assert sorted(timed) == ["cudnn", "product"]
    ((key, way),) = json.loads(path.read_text()).items()
    assert way == "product" and key.endswith(f"|{size_class(2, x.shape[-1])}")
    assert "conv 6>5 k3 d1" in key and "torch.float32" in key
    op(x, module.conv.weight, module.conv.bias, 1)  # the same size: no timing
    bigger = torch.nn.functional.pad(torch.randn(8, 6, 512), (module.left_pad, 0))
    op(bigger, module.conv.weight, module.conv.bias, 1)  # another size class: timed
    assert len(timed) == 4 and len(json.loads(path.read_text())) == 2
    later: list = []
    _fake_timing(monkeypatch, {"cudnn": 1.0, "product": 2.0}, later)  # would choose otherwise
    again = timed_conv(module, Choices(path), fallback="cudnn")
    again(x, module.conv.weight, module.conv.bias, 1)
    assert later == []  # the file's choice, no timing


def test_a_capture_never_times_and_takes_the_fallback(tmp_path, monkeypatch):
    timed: list = []
    _fake_timing(monkeypatch, {"cudnn": 2.0, "product": 1.0}, timed)
    monkeypatch.setattr(conv_choice, "_capturing", lambda x: True)
    module = CausalConv1d(6, 5, kernel=3)
    x = torch.nn.functional.pad(torch.randn(1, 6, 16), (module.left_pad, 0))
    used = []
    op = timed_conv(module, Choices(tmp_path / "c.json"), fallback="cudnn")
    op.ways = {k: (lambda *a, k=k, f=f: (used.append(k), f(*a))[1]) for k, f in op.ways.items()}
    op(x, module.conv.weight, module.conv.bias, 1)
    assert timed == [] and used == ["cudnn"] and not (tmp_path / "c.json").exists()


def test_an_unwritable_file_keeps_the_choices_in_memory_with_one_warning(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    choices = Choices(blocker / "choices.json")
    with caplog.at_level(logging.WARNING, logger="qtts"):
        choices.put("a", "product")
        choices.put("b", "cudnn")
    assert (choices.get("a"), choices.get("b")) == ("product", "cudnn")
    assert len([r for r in caplog.records if "kept in memory only" in r.getMessage()]) == 1


def test_with_kernels_times_every_convolution_a_product_can_compute(tmp_path):
    decoder = with_kernels(tiny_decoder(), gemm=True, choices=tmp_path / "c.json")
    frame_rate = frame_rate_convs(decoder)
    convs = [m for m in decoder.modules() if isinstance(m, (CausalConv1d, CausalConvTranspose1d))]
    timed = [m for m in convs if isinstance(m.cuda_op, TimedConv)]
    assert timed and all(m.conv.groups == 1 for m in timed)
    assert all(m.cuda_op is None or isinstance(m.cuda_op, TimedConv) or m in frame_rate
               for m in convs)  # fmt: skip
    for m in timed:  # the frame-rate convolutions fall back to the product, as without timing
        assert m.cuda_op.fallback == ("product" if any(m is f for f in frame_rate) else "cudnn")


def test_the_knob_names_the_file_on_cuda_only(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert EngineTuning.for_device("cuda", env={}).decoder_conv_choices is None
    timed = {"QTTS_DECODER_CONVS": "timed"}
    home = EngineTuning.for_device("cuda", env={**timed, "XDG_CACHE_HOME": str(tmp_path / "x")})
    assert home.decoder_conv_choices == str(tmp_path / "x" / "qtts" / "conv_choices.json")
    own = EngineTuning.for_device("cuda", env={**timed, "QTTS_CACHE_DIR": str(tmp_path / "q")})
    assert own.decoder_conv_choices == str(tmp_path / "q" / "conv_choices.json")
    assert EngineTuning.for_device("cpu", env=timed).decoder_conv_choices is None
    with pytest.raises(ValueError, match="QTTS_DECODER_CONVS must be one of fixed, timed"):
        EngineTuning.for_device("cuda", env={"QTTS_DECODER_CONVS": "fast"})
