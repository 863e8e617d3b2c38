"""How the engine runs on a device: one tuning object, with the CPU and GPU defaults decided here.

`qtts batch`, `qtts synth` and `qtts bench` all take their engine tuning from
`EngineTuning.for_device`, so the two never drift apart. Every QTTS_* knob of the engine and the
synthesizer is read from the environment by core/engine/device/knobs.py (torch-free, so the CLI
checks them before a job starts) and applied here, nowhere else (the table in
docs/engine-tuning.md). Knows devices and environment knobs; no tensors, no model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from qtts.core.engine.device.cpu_runtime import cpu_budget
from qtts.core.engine.device.knobs import LAYER_PATHS, SAMPLERS, VOCODER_CAPTURES, read_knobs
from qtts.kernels.backend import TRITON_AVAILABLE


@dataclass(frozen=True)
class EngineTuning:
    # Decode steps between host reads of the finished flags (the decode loop's only sync). A CPU
    # "sync" costs nothing, so the CPU checks every step and refills at once.
    check_every: int
    # KV view lengths are multiples of this: attention reads the first `view` positions of the
    # cache, and on GPU each view length has its own CUDA graph (all captured before decoding).
    view_bucket: int
    # Prompts per prefill pass. 1 runs each alone: the official single-request numerics, which
    # the CPU's fp32 golden parity relies on. More share one right-padded, masked pass (GPU, and
    # bf16 on a CPU, which has no bitwise parity to keep and multiplies many rows faster).
    prefill_group: int
    # Replay each decode step as a captured CUDA graph (GPU only).
    cuda_graphs: bool
    # "fused": both stacks' decode passes and the talker's prefill passes through the fused ops
    # (engine.fused_stack), 9 launches per layer pass instead of ~70 (the GPU default).
    # "packed": the code predictor's one-token steps through packed weights
    # (engine.packed_stack; the CPU default, where op dispatch dominates). "module": the
    # model's own forward, the twin of both.
    layer_path: str
    # Decode attention as grouped query rows instead of repeated K/V (engine.decode_attention).
    grouped_attention: bool
    # The fused stack calls the qtts custom ops (one kernel each on CUDA; what torch.compile and
    # the launch count see), or their torch twins directly: a CPU's custom ops run the twins
    # anyway, and skipping the custom-op dispatch saves 5-13% of a bf16 step there.
    custom_ops: bool
    # The decode loop may read device values on the host inside a step (the CPU sampler's top-k
    # candidate draw does). Never where steps are captured in graphs.
    allow_host_sync: bool
    # Who chooses tokens: "triton" (the kernel, kernels/sampling.py: one op per sampling site),
    # "torch" (its twin, core/engine/step/token_choice.py) or "auto" (by the tensors' device: these
    # tuning also run on CPU and meta tensors in tests and dry runs). `sampler_on` resolves
    # it, for the sampler and for the planner alike.
    sampler: str
    # The vocoder runs on its own thread beside the decode loop (GPU: its own stream), or after
    # each finished group on the decode thread (a CPU's thread budget:
    # core/engine/device/cpu_runtime.py).
    vocoder_thread: bool = True
    # torch's intra-op threads while synthesizing (the CPU's budget); None: as the process has it.
    threads: int | None = None
    # The decode loop runs on a stream of the device's highest priority, the vocoder on one of the
    # lowest (GPU; for_device turns it on there): freed SMs go to the step's kernels first. On an
    # H200 the two phases still shared the card one after the other (docs/performance.md): a
    # vocoder kernel already on the SMs is not preempted. QTTS_DECODE_PRIORITY=0 compares.
    decode_priority: bool = False
    # The speech decoder's frame-rate convolutions as matrix products on CUDA; off, cuDNN's
    # convolutions (core/engine/vocoder/decoder_kernels.py, core/engine/vocoder/conv_gemm.py).
    decoder_gemm: bool = True
    # Rows join a longer row's speech-decoder window, padded by at most JOIN_WASTE
    # (core/engine/vocoder/vocoder_windows.py): fewer, fuller windows on a GPU; a CPU keeps each
    # row in its own bucket (its decoder's cost is linear in frames).
    vocoder_join: bool = False
    # The vocoder's stream on a CUDA green context of this many SMs (core/synthesis/
    # decode_overlap.py, vocoder_stream): a vocoder kernel then occupies at most those SMs, and
    # the decode loop's kernels find the rest free. None: a plain stream (the default until a GPU
    # run shows the split pays).
    vocoder_sms: int | None = None
    # The speech decoder's window graphs (GPU): captured as each shape is first met on the
    # vocoder's thread ("lazy": a job's start-up pays for none), or every shape of the plan
    # before decoding ("ahead", as before; QTTS_VOCODER_CAPTURE=ahead compares the two).
    vocoder_capture: str = "lazy"
    # Windows of more rows x frames than this decode eagerly (None: all replay graphs): where a
    # window's device time is long enough, its launches hide behind it and a graph buys nothing
    # but capture time and memory. Off until a GPU run shows where that line lies.
    vocoder_graph_max: int | None = None
    # Where the speech decoder's timed convolution choices are kept (QTTS_DECODER_CONVS=timed:
    # each convolution in the way timed fastest on the card, core/engine/vocoder/conv_choice.py);
    # None: the fixed ways above (decoder_gemm). Off until a GPU run shows the choice pays.
    decoder_conv_choices: str | None = None

    @classmethod
    def for_device(
        cls,
        device: torch.device | str,
        env: Mapping[str, str] = os.environ,
        dtype: torch.dtype = torch.float32,
    ) -> EngineTuning:
        """The defaults for `device` and the weights' `dtype`, with the environment's knobs
        (docs/engine-tuning.md) applied: QTTS_CUDA_GRAPHS, QTTS_LAYER_PATH, QTTS_SAMPLER,
        QTTS_CPU_THREADS, QTTS_DECODE_PRIORITY, QTTS_DECODER_GEMM, QTTS_VOCODER_JOIN,
        QTTS_VOCODER_SMS, QTTS_VOCODER_CAPTURE, QTTS_VOCODER_GRAPH_MAX, QTTS_DECODER_CONVS."""
        knobs = read_knobs(env)
        cuda = torch.device(device).type == "cuda"
        budget = None if cuda else cpu_budget(env=env)
        half = dtype in (torch.bfloat16, torch.float16)
        return cls(
            check_every=8 if cuda else 1,
            view_bucket=256 if cuda else 64,
            prefill_group=64 if cuda or half else 1,
            cuda_graphs=cuda and knobs.cuda_graphs,
            layer_path=knobs.layer_path or default_layer_path(cuda, half),
            grouped_attention=cuda,
            custom_ops=cuda,
            allow_host_sync=not cuda,
            sampler=knobs.sampler,
            vocoder_thread=cuda or budget.vocoder_thread,
            threads=None if cuda else budget.threads,
            decode_priority=cuda and knobs.decode_priority,
            decoder_gemm=knobs.decoder_gemm,
            vocoder_join=cuda if knobs.vocoder_join is None else knobs.vocoder_join,
            vocoder_sms=knobs.vocoder_sms if cuda else None,
            vocoder_capture=knobs.vocoder_capture,
            vocoder_graph_max=knobs.vocoder_graph_max,
            decoder_conv_choices=knobs.conv_choices if cuda else None,
        )

    def __post_init__(self):
        if min(self.check_every, self.view_bucket, self.prefill_group) < 1:
            raise ValueError("engine tuning: check_every, view_bucket, prefill_group must be > 0")
        if self.cuda_graphs and self.allow_host_sync:
            raise ValueError("engine tuning: a step captured in a CUDA graph cannot sync")
        if self.layer_path not in LAYER_PATHS:
            raise ValueError(
                f"QTTS_LAYER_PATH must be one of {', '.join(LAYER_PATHS)}, got {self.layer_path!r}"
            )
        if self.sampler not in SAMPLERS:
            raise ValueError(f"engine tuning: sampler must be one of {SAMPLERS}")
        if self.vocoder_capture not in VOCODER_CAPTURES:
            raise ValueError(f"engine tuning: vocoder_capture must be one of {VOCODER_CAPTURES}")


def default_layer_path(cuda: bool, half: bool) -> str:
    """The GPU runs the fused ops. A CPU runs what measured fastest there (docs/engine-tuning.md,
    "Layer path on a CPU"): in bf16 the fused stack's torch twins (oneDNN multiplies the fused
    [out, in] weights best, and fewer ops cost less); in fp32 the packed predictor (MKL's small
    products run faster on its pre-transposed weights)."""
    if cuda or half:
        return "fused"
    return "packed"


def sampler_on(sampler: str, device: torch.device | str) -> str:
    """What `sampler` (EngineTuning.sampler) runs on `device`'s tensors: "triton" or "torch".
    "auto": the kernel on CUDA when triton is importable, the twin elsewhere; meta tensors stand
    in for CUDA (dry runs and launch counts see the GPU's one op per site)."""
    if sampler != "auto":
        return sampler
    kind = torch.device(device).type
    return "triton" if kind == "meta" or (kind == "cuda" and TRITON_AVAILABLE) else "torch"


def synthesis_generator(env: Mapping[str, str] = os.environ) -> str:
    """The generator a loaded synthesizer runs: QTTS_GENERATOR=naive picks the yardstick
    (qtts.core.synthesis.naive_generator) over the engine."""
    return read_knobs(env).generator
