"""How the engine runs on a device: one settings object, with the CPU and GPU defaults decided here.

`qtts batch`, `qtts synth` and `qtts bench` all take their engine settings from
`EngineSettings.for_device`, so the two never drift apart. Knows devices and environment knobs; no
tensors, no model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EngineSettings:
    # Decode steps between host reads of the finished flags (the decode loop's only sync). A CPU
    # "sync" costs nothing, so the CPU checks every step and refills at once.
    check_every: int
    # KV view lengths are multiples of this: attention reads the first `view` positions of the
    # cache, and on GPU each view length has its own CUDA graph (all captured before decoding).
    view_bucket: int
    # Prompts per prefill pass. 1 runs each alone: the official single-request numerics, which
    # the CPU golden parity relies on. More share one right-padded, masked pass (GPU).
    prefill_group: int
    # Replay each decode step as a captured CUDA graph (GPU only).
    cuda_graphs: bool
    # The code predictor's one-token steps through packed weights (engine.packed_stack).
    packed_predictor: bool
    # Both stacks' decode passes through the fused ops (engine.fused_stack): 9 launches per
    # layer pass instead of ~70 (GPU; the CPU runs the module or packed path, its twins).
    fused_layers: bool
    # Decode attention as grouped query rows instead of repeated K/V (engine.decode_attention).
    grouped_attention: bool
    # The decode loop may read device values on the host inside a step (the CPU sampler's top-k
    # candidate draw does). Never where steps are captured in graphs.
    allow_host_sync: bool

    @classmethod
    def for_device(
        cls, device: torch.device | str, env: Mapping[str, str] = os.environ
    ) -> EngineSettings:
        """The defaults for `device`. Environment knobs: QTTS_CUDA_GRAPHS=0 runs the GPU eagerly;
        QTTS_PACKED=0 runs the predictor's module path on CPU too (the packed step's twin);
        QTTS_FUSED=0 runs the module path on GPU (the fused stack's twin); QTTS_FUSED=1 runs the
        fused stack on CPU too, through the ops' torch twins (a check, not a speed-up)."""
        cuda = torch.device(device).type == "cuda"
        fused = env.get("QTTS_FUSED", "1" if cuda else "0") != "0"
        return cls(
            check_every=8 if cuda else 1,
            view_bucket=256 if cuda else 64,
            prefill_group=64 if cuda else 1,
            cuda_graphs=cuda and env.get("QTTS_CUDA_GRAPHS", "1") != "0",
            packed_predictor=not cuda and not fused and env.get("QTTS_PACKED", "1") != "0",
            fused_layers=fused,
            grouped_attention=cuda,
            allow_host_sync=not cuda,
        )

    def __post_init__(self):
        if min(self.check_every, self.view_bucket, self.prefill_group) < 1:
            raise ValueError("engine settings: check_every, view_bucket, prefill_group must be > 0")
        if self.cuda_graphs and self.allow_host_sync:
            raise ValueError("engine settings: a step captured in a CUDA graph cannot sync")
        if self.fused_layers and self.packed_predictor:
            raise ValueError("engine settings: the predictor runs fused or packed, not both")
