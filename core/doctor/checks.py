"""Every check, in the order the doctor runs them: cheap facts first, then the agreement checks,
then the measurements (the bandwidth check's figure is the roofline device of the decode step
and of the vocoder window)."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from qtts.core.doctor.agreement import bf16_vs_fp32, graph_replay, layer_paths
from qtts.core.doctor.kernel_twins import kernels_vs_twins
from qtts.core.doctor.runner import Check, DoctorRun, run_checks
from qtts.core.doctor.speed import bandwidth, decode_step
from qtts.core.doctor.versions import versions
from qtts.core.doctor.vocoder_precision import bf16_vocoder
from qtts.core.doctor.vocoder_window import vocoder_window

CHECKS = [
    ("versions", versions),
    ("layer paths: fused == module", layer_paths),
    ("triton kernels == twins", kernels_vs_twins),
    ("graph replay == eager", graph_replay),
    ("bf16 tracks fp32 (teacher-forced)", bf16_vs_fp32),
    ("bf16 vocoder tracks fp32 (audio SNR)", bf16_vocoder),
    ("memory bandwidth", bandwidth),
    ("decode step vs roofline", decode_step),
    ("vocoder window vs roofline", vocoder_window),
]


def doctor(device: torch.device, size: str) -> Iterator[Check]:
    """Each check's result as it finishes, on `device` with models of `size`."""
    from qtts.core.model.loader import use_device

    use_device(device)
    yield from run_checks(CHECKS, DoctorRun(device, size))
