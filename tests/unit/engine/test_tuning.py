"""Engine tuning: the device defaults, every environment knob read here and nowhere else, bad
values refused before any work, and one layer path turned into the engine's stacks."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import engines
import pytest
import torch

from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.step.fused_stack import FusedStack
from qtts.core.engine.step.packed_stack import PackedStack

REPO = Path(__file__).resolve().parents[3]


def test_layer_path_defaults_and_knob():
    assert EngineTuning.for_device("cuda", env={}).layer_path == "fused"
    assert EngineTuning.for_device("cpu", env={}).layer_path == "packed"  # float32
    # bf16 on a CPU: the fused stack's twins, which measured faster there (the tuning say why)
    cpu_bf16 = EngineTuning.for_device("cpu", env={}, dtype=torch.bfloat16)
    assert (cpu_bf16.layer_path, cpu_bf16.prefill_group) == ("fused", 64)  # one padded pass
    assert EngineTuning.for_device("cpu", env={}).prefill_group == 1  # fp32: official numerics
    assert EngineTuning.for_device("cuda", env={}, dtype=torch.float32).layer_path == "fused"
    for path in ("module", "packed", "fused"):
        env = {"QTTS_LAYER_PATH": path.upper()}
        assert EngineTuning.for_device("cuda", env=env).layer_path == path
    with pytest.raises(ValueError, match="QTTS_LAYER_PATH must be one of module, packed, fused"):
        EngineTuning.for_device("cpu", env={"QTTS_LAYER_PATH": "turbo"})
    with pytest.raises(ValueError, match="QTTS_FUSED is retired: set QTTS_LAYER_PATH"):
        EngineTuning.for_device("cpu", env={"QTTS_FUSED": "1"})


@pytest.mark.parametrize("path", ["module", "packed", "fused"])
def test_one_layer_path_builds_the_stacks(tiny_gqa, path):
    tuning = replace(engines.cpu_tuning(), layer_path=path)
    eng = engines.engine(tiny_gqa, 2, True, tuning)
    model = tiny_gqa[1]
    kinds = {
        "module": (type(model.talker.model), type(model.talker.code_predictor.model)),
        "packed": (type(model.talker.model), PackedStack),
        "fused": (FusedStack, FusedStack),
    }[path]
    assert (type(eng.talker_step), type(eng.predictor_step)) == kinds
    assert (eng.predictor_first is eng.predictor_step) == (path == "fused")


def test_the_environment_is_read_only_in_the_settings_module():
    """Reads of QTTS_* knobs (env.get, env[...], getenv) outside core/engine/device/tuning.py (the
    CLI's own QTTS_DEBUG and the test hook QTTS_FAKE_SYNTH excepted: they change no synthesis)."""
    read = re.compile(r"(?:\.get\(|getenv\(|\[)\s*[\"'](QTTS_\w+)")
    found = []
    home = ("core/engine/device/knobs.py", "core/engine/device/tuning.py")
    for folder in ("core", "kernels", "cli"):
        for p in (REPO / folder).rglob("*.py"):
            if p.relative_to(REPO).as_posix() in home:
                continue  # where the knobs are read, and applied
            for name in read.findall(p.read_text("utf-8")):
                if name not in ("QTTS_DEBUG", "QTTS_FAKE_SYNTH"):
                    found.append(f"{p.relative_to(REPO)}: {name}")
    assert found == []


def test_one_engine_construction_site():
    sources = [p for folder in ("core", "cli") for p in (REPO / folder).rglob("*.py")]
    calls = [p.relative_to(REPO).as_posix() for p in sources
             for _ in re.findall(r"(?<![\w.])Engine\(", p.read_text("utf-8"))]  # fmt: skip
    assert calls == ["core/synthesis/engine_driver.py"]


def test_cpu_thread_budget_policies_and_knob():
    """QTTS_CPU_THREADS: serial (the default: every core to one phase at a time, the vocoder
    inline), split (half the cores each, the vocoder on its thread), overlap (all cores to both)."""
    from qtts.core.engine.device.cpu_runtime import AUTO_POLICY, cpu_budget

    assert AUTO_POLICY == "serial"
    auto = cpu_budget(8, env={})
    assert (auto.policy, auto.threads, auto.vocoder_thread) == ("serial", 8, False)
    split = cpu_budget(8, env={"QTTS_CPU_THREADS": "split"})
    assert (split.threads, split.vocoder_thread) == (4, True)
    assert cpu_budget(1, env={"QTTS_CPU_THREADS": "split"}).threads == 1
    overlap = cpu_budget(8, env={"QTTS_CPU_THREADS": "Overlap"})
    assert (overlap.threads, overlap.vocoder_thread) == (8, True)
    with pytest.raises(ValueError, match="QTTS_CPU_THREADS must be one of auto, serial"):
        cpu_budget(2, env={"QTTS_CPU_THREADS": "many"})
    cpu = EngineTuning.for_device("cpu", env={})
    assert cpu.vocoder_thread is False and cpu.threads >= 1
    gpu = EngineTuning.for_device("cuda", env={"QTTS_CPU_THREADS": "serial"})
    assert gpu.vocoder_thread is True and gpu.threads is None  # a GPU keeps its vocoder stream


def test_decode_priority_and_decoder_gemm_defaults_and_knobs():
    """The GPU prioritizes its decode stream and runs the decoder's frame-rate convolutions as
    products by default; each knob turns its part off (a comparison, or a way out if a GPU
    misbehaves); a CPU has no streams."""
    cuda, cpu = EngineTuning.for_device("cuda", env={}), EngineTuning.for_device("cpu", env={})
    assert (cuda.decode_priority, cuda.decoder_gemm) == (True, True)
    assert cpu.decode_priority is False
    off = {"QTTS_DECODE_PRIORITY": "0", "QTTS_DECODER_GEMM": "0"}
    cuda_off = EngineTuning.for_device("cuda", env=off)
    assert (cuda_off.decode_priority, cuda_off.decoder_gemm) == (False, False)
    with pytest.raises(ValueError, match="QTTS_DECODE_PRIORITY must be one of 1, 0"):
        EngineTuning.for_device("cuda", env={"QTTS_DECODE_PRIORITY": "high"})


def test_vocoder_join_is_the_gpus_default_and_a_knob_either_way():
    """Rows join longer rows' speech-decoder windows on a GPU (fuller windows); a CPU keeps each
    row in its own bucket; QTTS_VOCODER_JOIN forces either, for a comparison."""
    assert EngineTuning.for_device("cuda", env={}).vocoder_join is True
    assert EngineTuning.for_device("cpu", env={}).vocoder_join is False
    assert EngineTuning.for_device("cuda", env={"QTTS_VOCODER_JOIN": "0"}).vocoder_join is False
    assert EngineTuning.for_device("cpu", env={"QTTS_VOCODER_JOIN": "1"}).vocoder_join is True
    with pytest.raises(ValueError, match="QTTS_VOCODER_JOIN must be one of 1, 0"):
        EngineTuning.for_device("cuda", env={"QTTS_VOCODER_JOIN": "yes"})


def test_every_knob_read_is_in_the_docs_table():
    """Each QTTS_* variable knobs.py reads has its row in docs/engine-tuning.md's table."""
    src = (REPO / "core" / "engine" / "device" / "knobs.py").read_text("utf-8")
    src += (REPO / "core" / "model" / "cpu_precision.py").read_text("utf-8")
    read = set(re.findall(r'"(QTTS_[A-Z0-9_]+)"', src)) - {"QTTS_FUSED", "QTTS_PACKED"}
    table = (REPO / "docs" / "engine-tuning.md").read_text("utf-8")
    rows = set(re.findall(r"^\| `(QTTS_[A-Z0-9_]+)` \|", table, flags=re.M))
    assert read and read <= rows, sorted(read - rows)


def test_vocoder_capture_and_graph_max_knobs():
    """The speech decoder's graphs are captured as their shapes are first met by default;
    QTTS_VOCODER_CAPTURE=ahead captures them all before decoding, for a comparison of start-up;
    QTTS_VOCODER_GRAPH_MAX leaves windows of more rows x frames eager (0 or unset: none)."""
    default = EngineTuning.for_device("cuda", env={})
    assert (default.vocoder_capture, default.vocoder_graph_max) == ("lazy", None)
    env = {"QTTS_VOCODER_CAPTURE": "Ahead", "QTTS_VOCODER_GRAPH_MAX": "512"}
    set_ = EngineTuning.for_device("cuda", env=env)
    assert (set_.vocoder_capture, set_.vocoder_graph_max) == ("ahead", 512)
    assert (
        EngineTuning.for_device("cuda", env={"QTTS_VOCODER_GRAPH_MAX": "0"}).vocoder_graph_max
        is None
    )
    with pytest.raises(ValueError, match="QTTS_VOCODER_CAPTURE must be one of lazy, ahead"):
        EngineTuning.for_device("cuda", env={"QTTS_VOCODER_CAPTURE": "never"})
    with pytest.raises(ValueError, match="QTTS_VOCODER_GRAPH_MAX must be a whole number of rows x"):
        EngineTuning.for_device("cuda", env={"QTTS_VOCODER_GRAPH_MAX": "lots"})
