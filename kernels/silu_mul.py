"""The MLP's activation in one kernel, as the torch op `qtts::silu_mul`: silu(gate) * up, reading
the fused gate/up projection [N, 2I] (gate first, as torch.chunk splits it) -> [N, I].

Unfused that is a SiLU and a multiply, each a full pass over [N, I]. Rounding follows the twin:
SiLU in fp32 rounded to the input dtype, then the product in that dtype. The op runs the Triton
kernel on CUDA and the twin elsewhere; its fake implementation gives meta calls their shape.
tests/unit/kernels/test_layer_kernels.py ties kernel and twin under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from qtts.kernels.backend import TRITON_AVAILABLE, tl, triton
from qtts.kernels.rounding import rounded

BLOCK = 1024  # columns per program


def silu_mul_twin(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [..., 2I] -> [..., I]; exactly the MLP's F.silu(gate) * up."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


if TRITON_AVAILABLE:

    @triton.jit
    def _silu_mul_kernel(
        gu_ptr,  # [N, 2I], unit stride along the columns
        gu_stride,
        out_ptr,  # [N, I] contiguous
        width,  # I
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = cols < width
        dt = out_ptr.dtype.element_ty
        gate = tl.load(gu_ptr + row * gu_stride + cols, mask=inside, other=0.0).to(tl.float32)
        up = tl.load(gu_ptr + row * gu_stride + width + cols, mask=inside, other=0.0)
        act = rounded(gate / (1.0 + tl.exp(-gate)), dt)  # silu, rounded as the twin
        tl.store(
            out_ptr + row * width + cols, rounded(act * up.to(tl.float32), dt).to(dt), mask=inside
        )


def silu_mul_triton(gate_up: torch.Tensor) -> torch.Tensor:
    """The kernel's launcher: gate_up [..., 2I] with unit column stride -> new [..., I]."""
    if not TRITON_AVAILABLE:
        raise RuntimeError("silu_mul_triton needs triton; the op qtts::silu_mul runs the twin")
    width = gate_up.shape[-1] // 2
    rows = gate_up.reshape(-1, 2 * width)  # [N, 2I]
    if rows.stride(-1) != 1 or gate_up.shape[-1] % 2:
        raise ValueError("silu_mul: gate_up needs an even last dim with unit stride")
    out = torch.empty((*gate_up.shape[:-1], width), dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0]:
        grid = (rows.shape[0], triton.cdiv(width, BLOCK))
        _silu_mul_kernel[grid](rows, rows.stride(0), out, width, BLOCK=BLOCK)
    return out


@torch.library.custom_op("qtts::silu_mul", mutates_args=())
def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up as one op: the Triton kernel on CUDA, the twin elsewhere. The result is
    contiguous on every device, as the kernel's and the fake's."""
    return silu_mul_twin(gate_up).contiguous()


@silu_mul.register_kernel("cuda")
def _(gate_up):
    return silu_mul_triton(gate_up) if TRITON_AVAILABLE else silu_mul_twin(gate_up).contiguous()


@silu_mul.register_fake
def _(gate_up):
    shape = (*gate_up.shape[:-1], gate_up.shape[-1] // 2)
    return torch.empty(shape, dtype=gate_up.dtype, device=gate_up.device)
