"""RMSNorm over the last dim in one kernel, as the torch op `qtts::rms_norm`.

Semantics are the official RMSNorm's (qtts.core.model.talker.RMSNorm): normalise in fp32, cast to
the input dtype, then scale by the weight in that dtype. Unfused that is six kernels (cast, pow,
mean, add + rsqrt, mul, cast, mul); here one program per row reads the row once.

The op runs the Triton kernel on CUDA and the torch twin everywhere else; its fake implementation
gives meta and FakeTensor calls their shape, so a meta-device count and torch.compile see one op.
tests/unit/kernels/test_layer_kernels.py ties kernel and twin under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import torch

from qtts.kernels.backend import TRITON_AVAILABLE, tl, triton
from qtts.kernels.rounding import rounded


def rms_norm_twin(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., D], weight [D] (x's dtype) -> [..., D]; exactly RMSNorm.forward."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


if TRITON_AVAILABLE:

    @triton.jit
    def _rms_norm_kernel(
        x_ptr,  # [N, D], unit stride along D
        x_stride,
        w_ptr,  # [D]
        out_ptr,  # [N, D] contiguous
        dim,
        eps,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        inside = offs < dim
        dt = out_ptr.dtype.element_ty
        x = tl.load(x_ptr + row * x_stride + offs, mask=inside, other=0.0).to(tl.float32)
        inv = tl.math.rsqrt(tl.sum(x * x, axis=0) / dim + eps)
        h = rounded(x * inv, dt)  # rounded before the scale, as the twin
        w = tl.load(w_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * dim + offs, rounded(w * h, dt).to(dt), mask=inside)


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The kernel's launcher: x [..., D] with unit stride along D -> a new contiguous [..., D]."""
    if not TRITON_AVAILABLE:
        raise RuntimeError("rms_norm_triton needs triton; the op qtts::rms_norm runs the twin")
    dim = x.shape[-1]
    rows = x.reshape(-1, dim)  # [N, D]: a view for the layouts the engine passes
    if rows.stride(-1) != 1 or weight.shape != (dim,) or weight.dtype != x.dtype:
        raise ValueError("rms_norm: x needs unit stride along D and a [D] weight of its dtype")
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # [..., D]
    if rows.shape[0]:
        _rms_norm_kernel[(rows.shape[0],)](
            rows, rows.stride(0), weight, out, dim, eps, BLOCK=triton.next_power_of_2(dim)
        )
    return out


@torch.library.custom_op("qtts::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as one op: the Triton kernel on CUDA, the twin elsewhere. The result is contiguous
    on every device, as the kernel's and the fake's (the twin keeps a permuted input's layout)."""
    return rms_norm_twin(x, weight, eps).contiguous()


@rms_norm.register_kernel("cuda")
def _(x, weight, eps):
    if TRITON_AVAILABLE:
        return rms_norm_triton(x, weight, eps)
    return rms_norm_twin(x, weight, eps).contiguous()


@rms_norm.register_fake
def _(x, weight, eps):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
