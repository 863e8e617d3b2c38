"""Rounding an fp32 value to a narrower float inside a Triton kernel, the way torch rounds.

Kernels here do their arithmetic in fp32 and round where the torch twin rounds (each op of the
twin returns its input dtype). `.to(tl.bfloat16)` rounds to nearest-even on a GPU, but triton's
interpreter (TRITON_INTERPRET=1, which CI uses to test kernels against twins) truncates; so bf16 is
rounded here by integer arithmetic on the fp32 bits, which is exact on both. (NaN payloads may
become infinities; none reach these kernels from finite inputs.)
"""

from __future__ import annotations

from qtts.kernels.backend import TRITON_AVAILABLE, tl, triton

if TRITON_AVAILABLE:

    @triton.jit
    def rounded(x, dt: tl.constexpr):
        """fp32 x -> fp32 holding x rounded to dt (round to nearest, ties to even)."""
        if dt == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            return bits.to(tl.float32, bitcast=True)
        else:
            return x.to(dt).to(tl.float32)
else:  # the kernels that use it are not defined either
    rounded = None
