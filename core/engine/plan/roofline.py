"""Roofline of one decode step: the bytes it must move and the FLOPs it must do, and the lower
bound they put on its time on a device, as a ceiling in audio-seconds per second.

Per frame, every slot runs the 28-layer talker once and the code predictor 15 times (a 2-token
pass, then 14 one-token passes), each pass re-reading the predictor's weights, and attends over
its KV view. Weights are read once per pass whatever the batch; KV grows with slots x view. The
third bound is kernel launches (counted on the meta device, qtts.core.bench.launches) times a
stated cost per launch: inside a CUDA graph each kernel still takes a few microseconds, however
little it does. Arithmetic only.
"""

from __future__ import annotations

from dataclasses import dataclass

from qtts.core.model.config import ModelConfig

FRAME_S = 0.08  # audio per frame (12.5 Hz)
# A kernel replayed in a CUDA graph costs ~2-3 us on H100-class GPUs even when it does nothing;
# the low end, so the launch bound stays a lower bound.
LAUNCH_S = 2e-6


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    bandwidth: float  # bytes/s of device memory
    flops: float  # dense matmul FLOP/s in the job's dtype
    launch_s: float = LAUNCH_S  # seconds per kernel launch inside a graph
    memory_gib: float | None = None  # the card's memory, when it is a known card


# Datasheet figures: memory bandwidth, dense bf16 tensor FLOP/s (no sparsity), memory.
DEVICES = {
    "l4": DeviceSpec(
        "L4 (0.3 TB/s, 121 TFLOP/s bf16 dense, 24 GiB)", 0.3e12, 121e12, memory_gib=24
    ),
    "a10": DeviceSpec(
        "A10 (0.6 TB/s, 125 TFLOP/s bf16 dense, 24 GiB)", 0.6e12, 125e12, memory_gib=24
    ),
    "rtx4090": DeviceSpec(
        "RTX 4090 (1.0 TB/s, 165 TFLOP/s bf16 dense, 24 GiB)", 1.008e12, 165e12, memory_gib=24
    ),
    "l40s": DeviceSpec(
        "L40S (0.864 TB/s, 362 TFLOP/s bf16 dense, 48 GiB)", 0.864e12, 362e12, memory_gib=48
    ),
    "a100-40": DeviceSpec(
        "A100 40GB SXM (1.56 TB/s, 312 TFLOP/s bf16 dense)", 1.555e12, 312e12, memory_gib=40
    ),
    "a100-80": DeviceSpec(
        "A100 80GB SXM (2.04 TB/s, 312 TFLOP/s bf16 dense)", 2.039e12, 312e12, memory_gib=80
    ),
    "h100": DeviceSpec(
        "H100 SXM (3.35 TB/s, 989 TFLOP/s bf16 dense, 80 GiB)", 3.35e12, 989e12, memory_gib=80
    ),
    "h200": DeviceSpec(
        "H200 SXM (4.8 TB/s, 989 TFLOP/s bf16 dense, 141 GiB)", 4.8e12, 989e12, memory_gib=141
    ),
}


@dataclass(frozen=True)
class StepCost:
    weight_bytes: float
    kv_bytes: float
    flops: float
    launches: int = 0  # kernel launches per step (0: not counted)

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    def bounds_s(self, device: DeviceSpec) -> dict[str, float]:
        """The three lower bounds on the step's time: memory, compute, launches."""
        return {
            "memory": self.bytes / device.bandwidth,
            "compute": self.flops / device.flops,
            "launches": self.launches * device.launch_s,
        }

    def lower_bound_s(self, device: DeviceSpec) -> float:
        return max(self.bounds_s(device).values())

    def ceiling_audio_s_per_s(self, slots: int, device: DeviceSpec) -> float:
        return slots * FRAME_S / self.lower_bound_s(device)


def _layer_params(hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int) -> int:
    attention = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    return attention + 3 * hidden * inter  # q, k, v, o and gate, up, down (norms: negligible)


def decode_step_cost(
    config: ModelConfig, slots: int, view: int, act_bytes: int, launches: int = 0
) -> StepCost:
    """One decode step for `slots` slots, each attending over `view` talker positions, issuing
    `launches` kernels."""
    t, cp = config.talker, config.code_predictor
    talker = (
        t.num_hidden_layers
        * _layer_params(
            t.hidden_size,
            t.num_attention_heads,
            t.num_key_value_heads,
            t.head_dim,
            t.intermediate_size,
        )
        + t.vocab_size * t.hidden_size
    )
    passes = cp.num_code_groups - 1  # 15 predictor passes per frame
    predictor = cp.num_hidden_layers * _layer_params(
        cp.hidden_size,
        cp.num_attention_heads,
        cp.num_key_value_heads,
        cp.head_dim,
        cp.intermediate_size,
    )
    projection = t.hidden_size * cp.hidden_size if cp.hidden_size != t.hidden_size else 0
    head = cp.vocab_size * cp.hidden_size
    weights = (talker + passes * (predictor + projection) + passes * head) * act_bytes
    kv_position = t.num_hidden_layers * 2 * t.num_key_value_heads * t.head_dim * act_bytes
    kv = slots * (view + 1) * kv_position  # read the view, write one position
    tokens = passes + 1  # the first predictor pass runs 2 tokens
    matmul = talker + tokens * (predictor + projection) + passes * head
    attention = 4 * t.num_attention_heads * t.head_dim * view * t.num_hidden_layers
    return StepCost(weights, kv, 2.0 * slots * matmul + slots * attention, launches)
