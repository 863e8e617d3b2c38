"""bf16 on a CPU computes in bf16: through the engine's prefill and decode steps (the CPU's layer
path) and the vocoder's windows, every matmul and convolution takes bf16 operands, and no weight
is cast on the way (weights are converted once, when they load). Only activations meet fp32,
where the model needs it: norm statistics, RoPE angles, logits for sampling."""

import engines
import torch
from tiny_models import as_loaded_in_bf16, tiny_decoder
from torch.utils._python_dispatch import TorchDispatchMode

from qtts.core.engine.step.fused_stack import FusedStack
from qtts.core.engine.vocoder.vocoder_windows import decode_bucketed

# As the dispatch mode sees them (composite ops arrive undecomposed in inference mode).
MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "conv1d", "conv_transpose1d",
           "convolution", "_convolution", "scaled_dot_product_attention"}  # fmt: skip
CASTS = {"_to_copy", "to", "copy_"}


class ComputeLog(TorchDispatchMode):
    """(op, floating operand dtypes) of every matmul, attention and convolution (a mask's bool
    aside), and every copy made of one of
    `weights` (a new tensor from its storage: a cast or a move)."""

    def __init__(self, weights):
        super().__init__()
        self.storages = {w.untyped_storage().data_ptr() for w in weights}
        self.matmuls: list[tuple[str, set]] = []
        self.weight_casts: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if name in MATMULS:
            self.matmuls.append((name, {t.dtype for t in tensors if t.is_floating_point()}))
        out = func(*args, **(kwargs or {}))
        if name in CASTS and tensors:
            source = tensors[-1] if name == "copy_" else tensors[0]
            ptr = source.untyped_storage().data_ptr()
            if ptr in self.storages and out.untyped_storage().data_ptr() != ptr:
                self.weight_casts.append(f"{name} to {out.dtype}")
        return out


def test_decode_steps_multiply_in_bf16_and_cast_no_weight(tiny):
    config, model, tok = tiny
    bf16 = (config, as_loaded_in_bf16(model), tok)
    eng = engines.engine(bf16, 3, False, dtype=torch.bfloat16)  # the CPU's bf16 defaults
    assert isinstance(eng.talker_step, FusedStack)
    weights = list(bf16[1].parameters()) + list(bf16[1].buffers())
    log = ComputeLog(weights)
    with log:
        codes = engines.run_codes(eng, engines.engine_requests(engines.prompts(bf16)[:3], 6))
    assert len(codes) == 3
    assert len(log.matmuls) > 100  # prefill and steps ran under the log
    assert all(dtypes == {torch.bfloat16} for _, dtypes in log.matmuls), log.matmuls
    assert log.weight_casts == []


def test_the_vocoder_multiplies_and_convolves_in_bf16():
    decoder = tiny_decoder().to(torch.bfloat16)
    codes = [torch.randint(0, decoder.cfg.codebook_size, (n, 16)) for n in (40, 33)]
    log = ComputeLog(list(decoder.parameters()) + list(decoder.buffers()))
    with log:  # oneDNN's convolutions, as a job runs them
        audio = decode_bucketed(decoder, codes)
    assert [a.dtype for a in audio] == [torch.float32] * 2  # the output, after the windows
    assert {name for name, _ in log.matmuls} >= {"conv1d", "conv_transpose1d", "linear"}
    assert all(dtypes == {torch.bfloat16} for _, dtypes in log.matmuls), log.matmuls
    assert log.weight_casts == []
