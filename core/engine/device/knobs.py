"""The environment's QTTS_* knobs, read and checked in one place, without torch.

`EngineTuning.for_device` applies them to a device's defaults; the CLI reads them before a job
takes its lock, so a bad value is a one-line usage error (exit 2) that changes nothing, instead
of a failure after the weights are loaded. The table of knobs is in docs/engine-tuning.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qtts.core.errors import UsageError
from qtts.core.model.cpu_precision import read_bf16_knob

SAMPLERS = ("auto", "torch", "triton")
# How a decode step runs a decoder layer (core/engine/step/layer_path.py): the model's own modules,
# packed one-token predictor weights (CPU), or the fused ops (GPU; their torch twins elsewhere).
LAYER_PATHS = ("module", "packed", "fused")
GENERATORS = ("engine", "naive")
# How decoding and the vocoder share a CPU's threads (core/engine/device/cpu_runtime.py).
CPU_THREADS = ("auto", "serial", "split", "overlap")
# When the speech decoder's window graphs are captured (core/engine/vocoder/vocoder_graphs.py).
VOCODER_CAPTURES = ("lazy", "ahead")
# How the speech decoder's convolutions pick their way (core/engine/vocoder/conv_choice.py).
DECODER_CONVS = ("fixed", "timed")
RETIRED = {
    "QTTS_FUSED": "QTTS_LAYER_PATH=fused|module",
    "QTTS_PACKED": "QTTS_LAYER_PATH=packed|module",
}


class KnobError(UsageError):
    """A QTTS_* environment variable with a value qtts does not take (exit 2)."""


@dataclass(frozen=True)
class Knobs:
    cuda_graphs: bool  # QTTS_CUDA_GRAPHS=0: the GPU decodes eagerly
    layer_path: str | None  # QTTS_LAYER_PATH; None: the device's default
    sampler: str  # QTTS_SAMPLER: "auto" unless forced
    generator: str  # QTTS_GENERATOR: the engine, or the naive yardstick
    cpu_bf16: str  # QTTS_CPU_BF16: what --dtype auto means on a CPU (core/model/cpu_precision.py)
    cpu_threads: (
        str  # QTTS_CPU_THREADS: how a CPU shares its threads (core/engine/device/cpu_runtime.py)
    )
    decode_priority: bool  # QTTS_DECODE_PRIORITY=0: the decode loop on the default stream
    decoder_gemm: bool  # QTTS_DECODER_GEMM=0: the decoder's frame-rate convolutions by cuDNN
    # QTTS_VOCODER_JOIN: rows join a longer row's vocoder window (core/engine/vocoder/
    # vocoder_windows.py); None: the device's default (on for CUDA)
    vocoder_join: bool | None
    # QTTS_VOCODER_SMS: the vocoder's stream on a green context of that many SMs (GPU), so its
    # kernels cannot take every SM from the decode loop's; None: a plain stream
    vocoder_sms: int | None
    # QTTS_VOCODER_CAPTURE: the speech decoder's window graphs captured as each shape is first
    # met ("lazy", on the vocoder's thread) or every shape before decoding starts ("ahead")
    vocoder_capture: str
    # QTTS_VOCODER_GRAPH_MAX: windows of more rows x frames than this run eagerly (their device
    # time hides their launches); None: every window replays a graph
    vocoder_graph_max: int | None
    # QTTS_DECODER_CONVS=timed: each speech-decoder convolution a product can compute takes the
    # way timed fastest on the card, kept in the file `conv_choices` names; None: fixed ways
    conv_choices: str | None


def read_knobs(env: Mapping[str, str] = os.environ) -> Knobs:
    for old, new in RETIRED.items():
        if old in env:
            raise KnobError(f"{old} is retired: set {new} instead")
    return Knobs(
        cuda_graphs=_pick(env, "QTTS_CUDA_GRAPHS", ("1", "0"), "1") != "0",
        layer_path=_pick(env, "QTTS_LAYER_PATH", LAYER_PATHS, None),
        sampler=_pick(env, "QTTS_SAMPLER", SAMPLERS, "auto"),
        generator=_pick(env, "QTTS_GENERATOR", GENERATORS, "engine"),
        cpu_bf16=read_bf16_knob(env),
        cpu_threads=_pick(env, "QTTS_CPU_THREADS", CPU_THREADS, "auto"),
        decode_priority=_pick(env, "QTTS_DECODE_PRIORITY", ("1", "0"), "1") != "0",
        decoder_gemm=_pick(env, "QTTS_DECODER_GEMM", ("1", "0"), "1") != "0",
        vocoder_join=_flag(_pick(env, "QTTS_VOCODER_JOIN", ("1", "0"), None)),
        vocoder_sms=_count(env, "QTTS_VOCODER_SMS", "SMs"),
        vocoder_capture=_pick(env, "QTTS_VOCODER_CAPTURE", VOCODER_CAPTURES, "lazy"),
        vocoder_graph_max=_count(env, "QTTS_VOCODER_GRAPH_MAX", "rows x frames"),
        conv_choices=_conv_choices(env),
    )


def _conv_choices(env: Mapping[str, str]) -> str | None:
    """The file of timed convolution choices under QTTS_DECODER_CONVS=timed: in
    $QTTS_CACHE_DIR, else $XDG_CACHE_HOME/qtts, else ~/.cache/qtts; None for fixed ways."""
    if _pick(env, "QTTS_DECODER_CONVS", DECODER_CONVS, "fixed") == "fixed":
        return None
    if env.get("QTTS_CACHE_DIR", "").strip():
        return str(Path(env["QTTS_CACHE_DIR"].strip()) / "conv_choices.json")
    root = Path(env.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache")
    return str(root / "qtts" / "conv_choices.json")


def _count(env: Mapping[str, str], name: str, unit: str) -> int | None:
    """env[name] as a count of at least 1; unset, empty or 0: None."""
    value = env.get(name, "").strip()
    if not value or value == "0":
        return None
    if not value.isdigit():
        raise KnobError(f"{name} must be a whole number of {unit} (0 or unset: off), got {value!r}")
    return int(value)


def _flag(value: str | None) -> bool | None:
    return None if value is None else value == "1"


def _pick(env: Mapping[str, str], name: str, allowed: tuple[str, ...], default):
    """env[name] as one of `allowed` (any case, spaces ignored); unset or empty: `default`."""
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value not in allowed:
        raise KnobError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value
