"""What this machine can do, measured: memory bandwidth (a large copy) and matrix FLOP/s (a large
matmul in the job's dtype). The roofline's device when `qtts bench` judges its own step times;
on CPU no datasheet applies, so both are measured. Knows tensors only."""

from __future__ import annotations

import time

import torch

from qtts.core.engine.plan.roofline import DeviceSpec


def seconds_per_call(fn, device: torch.device, repeats: int) -> float:
    fn()  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / repeats


def measure(device: torch.device, dtype: torch.dtype) -> DeviceSpec:
    """Copy bandwidth (bytes read + written per second) and dense matmul FLOP/s in `dtype`."""
    cuda = device.type == "cuda"
    n = (1 << 28) // 4  # 256 MiB: well past any CPU's last-level cache
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    bandwidth = 2 * src.nbytes / seconds_per_call(lambda: dst.copy_(src), device, 10)
    m = 4096 if cuda else 1024
    a = torch.randn(m, m, device=device).to(dtype)
    b = torch.randn(m, m, device=device).to(dtype)
    flops = 2 * m**3 / seconds_per_call(lambda: a @ b, device, 10 if cuda else 3)
    name = torch.cuda.get_device_name(device) if cuda else "this CPU"
    label = f"{name} (measured: {bandwidth / 1e9:.0f} GB/s, {flops / 1e12:.2f} TFLOP/s)"
    return DeviceSpec(label, bandwidth, flops)
