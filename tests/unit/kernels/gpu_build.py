"""Compile a captured kernel launch for a CUDA target without a GPU, and read its registers and
spills from ptxas.

triton.compile with an explicit GPUTarget needs no driver: the launch's signature, constexprs and
alignment attributes come from triton's own binder (as JITFunction.run derives them), and the
cubin from the ptxas shipped in the triton wheel. A CompiledKernel's n_regs/n_spills are only
filled when the cubin is loaded on a device, so they are read from ptxas's -v log instead.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass

import triton
from kernel_launches import Launch
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature

_REGS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True)
class Build:
    registers: int  # per thread
    spill_bytes: int  # stores + loads
    threads: int  # per program: num_warps * 32
    log: str  # ptxas -v
    ptx: str = ""  # the PTX ptxas assembled

    def __str__(self) -> str:
        return f"{self.registers} registers, {self.spill_bytes} spill bytes, {self.threads} threads"


def build(launch: Launch, arch: int, cache_dir: str) -> Build:
    """launch compiled for sm_<arch> (cubin included) -> its ptxas resource usage."""
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    kernel, kwargs = launch.kernel, dict(launch.kwargs)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound,
                                                              specialization, options)  # fmt: skip
    src = ASTSource(kernel, signature, constexprs, attrs)
    log = io.StringIO()
    with triton.knobs.compilation.scope(), triton.knobs.nvidia.scope(), triton.knobs.cache.scope():
        triton.knobs.cache.dir = cache_dir  # keeps ~/.triton clean
        triton.knobs.compilation.always_compile = True  # a cache hit would skip ptxas and its log
        triton.knobs.nvidia.dump_ptxas_log = True  # printed to stdout
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(src, target=target, options=options.__dict__)
    text = log.getvalue()
    regs, spills = _REGS.findall(text), _SPILLS.findall(text)  # one of each per function
    if "cubin" not in compiled.asm or not regs or not spills:
        raise AssertionError(f"no cubin or no ptxas resource usage for sm_{arch}:\n{text}")
    return Build(registers=max(map(int, regs)), spill_bytes=sum(int(n) for s in spills for n in s),
                 threads=compiled.metadata.num_warps * 32, log=text,
                 ptx=compiled.asm.get("ptx", ""))  # fmt: skip
