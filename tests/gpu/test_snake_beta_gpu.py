"""The SnakeBeta kernel compiled for the GPU == its torch twin on CUDA tensors, at the speech
decoder's real widths and window lengths (aligned rows, unaligned rows, a trimmed transposed
conv's output, more channel rows than a grid's second axis holds, more elements than an int32
offset reaches); the op dispatches to it on CUDA and replays in a CUDA graph; and a decoder with
the op installed in its SnakeBeta modules (cuda_op) gives the formula's audio. The CPU twin of
this file is tests/unit/kernels/test_snake_beta_kernel.py (interpreter)."""

import importlib.util

import pytest
import torch
from tiny_models import tiny_decoder

from qtts.core.model.codec_modules import SNAKE_EPS, SnakeBeta

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]

# As the interpreter test: against the twin in fp32 rounded once, one ulp of the dtype; against
# the eager twin in the dtype, that twin's own roundings of sin's argument (see the CPU test).
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2**-7}
EAGER_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2**-4}
# The tiny decoder in fp32 without TF32: each SnakeBeta a few fp32 ulps off the formula's, carried
# through its convolutions; the golden audio tolerance (tests/golden.py).
AUDIO_ATOL = 1e-4

SHAPES = {  # [B, C, T] and how many samples past T each channel row holds
    "first_block_odd_frames": ((8, 1536, 323 * 4), 0),  # T = 1292: rows not 16-aligned
    "trimmed_x5": ((4, 384, 325 * 32 * 5), 5),  # after the x5 transposed conv
    "last_block": ((2, 96, 325 * 1920), 0),  # a full window's samples
    "many_rows": ((64, 1536, 40), 0),  # 98,304 channel rows > 65,535
}


def _rel(a, b) -> float:
    return ((a.float() - b.float()).abs() / b.float().abs().clamp_min(1.0)).max().item()


def _inputs(shape, trim, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    b, c, t = shape
    x = (3 * torch.randn(b, c, t + trim, device="cuda", generator=g)).to(dtype)[..., :t]
    la, lb = [(0.1 * torch.randn(c, device="cuda", generator=g)).to(dtype) for _ in "ab"]
    return x, la, lb


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("case", list(SHAPES))
def test_kernel_equals_its_twin_on_cuda(case, dtype):
    from qtts.kernels.snake_beta import snake_beta_triton, snake_beta_twin

    shape, trim = SHAPES[case]
    x, la, lb = _inputs(shape, trim, dtype, seed=0)
    got = snake_beta_triton(x, la, lb, SNAKE_EPS)
    once = snake_beta_twin(x.float(), la.float(), lb.float(), SNAKE_EPS).to(dtype)
    assert got.is_contiguous() and got.shape == x.shape
    assert _rel(got, once) <= TOLERANCE[dtype]
    assert _rel(got, snake_beta_twin(x, la, lb, SNAKE_EPS)) <= EAGER_TOLERANCE[dtype]


def test_offsets_past_int32():
    """36 rows of the last block: 2.16e9 elements (4.3 GB in bf16); the last row is checked."""
    from qtts.kernels.snake_beta import snake_beta_triton, snake_beta_twin

    b, c, t = 36, 96, 325 * 1920
    assert b * c * t > 2**31
    x = torch.randn(b, c, t, device="cuda", dtype=torch.bfloat16)
    la = lb = torch.zeros(c, device="cuda", dtype=torch.bfloat16)
    got = snake_beta_triton(x, la, lb, SNAKE_EPS)[-1:]
    want = snake_beta_twin(x[-1:].float(), la.float(), lb.float(), SNAKE_EPS).bfloat16()
    assert _rel(got, want) <= TOLERANCE[torch.bfloat16]


def test_the_op_runs_the_kernel_on_cuda_and_in_a_graph(monkeypatch):
    import qtts.kernels.snake_beta as sb

    calls = []
    real = sb.snake_beta_triton
    monkeypatch.setattr(sb, "snake_beta_triton", lambda *a: calls.append(1) or real(*a))
    x, la, lb = _inputs((2, 96, 4000), 0, torch.bfloat16, seed=1)
    first = sb.snake_beta(x, la, lb, SNAKE_EPS)  # compiles the kernel before the capture
    assert calls == [1]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sb.snake_beta(x, la, lb, SNAKE_EPS)
    x.copy_(_inputs((2, 96, 4000), 0, torch.bfloat16, seed=2)[0])
    graph.replay()
    assert torch.equal(out, sb.snake_beta_triton(x, la, lb, SNAKE_EPS))
    assert not torch.equal(out, first)


def test_the_decoder_with_the_op_installed_gives_the_formulas_audio():
    from qtts.kernels.snake_beta import snake_beta

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        decoder = tiny_decoder().cuda()
        g = torch.Generator().manual_seed(0)
        codes = torch.randint(0, 64, (3, 16, 41), generator=g).cuda()  # [B, Q, T]
        with torch.inference_mode():
            want = decoder(codes)
            calls = []
            for module in decoder.modules():
                if isinstance(module, SnakeBeta):
                    module.cuda_op = lambda *a: calls.append(a[3]) or snake_beta(*a)
            got = decoder(codes)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    snakes = sum(isinstance(m, SnakeBeta) for m in decoder.modules())
    assert len(calls) == snakes and set(calls) == {SNAKE_EPS}
    torch.testing.assert_close(got, want, rtol=0, atol=AUDIO_ATOL)
