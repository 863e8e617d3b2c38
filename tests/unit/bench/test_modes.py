"""`qtts bench` measures the path `qtts batch` would take (environment knobs included) and its
eager twin, the module path."""

import pytest

from qtts.core.bench.throughput import fast_mode, mode_tuning


@pytest.mark.parametrize("path", ["packed", "fused", "module"])
def test_the_cpu_fast_mode_is_the_layer_path_batch_runs(monkeypatch, path):
    monkeypatch.setenv("QTTS_LAYER_PATH", path)
    assert fast_mode("cpu") == path
    assert mode_tuning(path, "cpu").layer_path == path
    eager = mode_tuning("eager", "cpu")
    assert eager.layer_path == "module" and not eager.cuda_graphs


def test_a_mode_this_device_does_not_run_is_refused(monkeypatch):
    monkeypatch.delenv("QTTS_LAYER_PATH", raising=False)
    assert fast_mode("cpu") == "packed"
    with pytest.raises(ValueError, match="does not run on cpu"):
        mode_tuning("graph", "cpu")


def test_the_gpu_fast_mode_is_named_after_what_runs(monkeypatch):
    monkeypatch.delenv("QTTS_LAYER_PATH", raising=False)
    monkeypatch.delenv("QTTS_CUDA_GRAPHS", raising=False)
    assert fast_mode("cuda") == "graph"
    monkeypatch.setenv("QTTS_CUDA_GRAPHS", "0")  # no graphs: the fused layer path, eagerly
    assert fast_mode("cuda") == "fused" and not mode_tuning("fused", "cuda").cuda_graphs
