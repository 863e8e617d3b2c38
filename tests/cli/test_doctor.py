"""`qtts doctor` on CPU: every check answers, the GPU-only ones skip with their reason, one JSON
line on stdout, exit 0; and a check that raises is one failed line that flips the exit code."""

import json
import os
import subprocess
import sys

from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.doctor import checks as doctor_checks
from qtts.core.doctor.runner import DoctorRun, all_held, run_checks, skipped, verdict

NAMES = [name for name, _ in doctor_checks.CHECKS]
GPU_ONLY = {"triton kernels == twins", "graph replay == eager"}
# Run where --dtype auto is bf16: on CUDA, and on a CPU with native bf16 (the suite says it has
# none: QTTS_CPU_BF16=0, tests/conftest.py).
BF16 = {"bf16 tracks fp32 (teacher-forced)", "bf16 vocoder tracks fp32 (audio SNR)"}


def test_doctor_on_cpu_runs_what_applies_and_says_what_it_skipped():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "qtts", "doctor", "--device", "cpu"],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stdout.strip().splitlines()  # stdout is the JSON line alone
    report = json.loads(line)
    assert report["ok"] is True
    rows = {r["name"]: r for r in report["doctor"]}
    assert list(rows) == NAMES
    for name, row in rows.items():
        assert row["status"] == ("skipped" if name in GPU_ONLY | BF16 else "ok"), row
        assert row["detail"] and "\n" not in row["detail"]
        assert row["name"] in proc.stderr  # the table
    assert all("needs CUDA" in rows[n]["detail"] for n in GPU_ONLY)
    assert all("runs float32 under --dtype auto" in rows[n]["detail"] for n in BF16)
    assert rows["layer paths: fused == module"]["figures"]["codes_equal"] is True
    assert rows["memory bandwidth"]["figures"]["bandwidth_gb_s"] > 0
    roofline = rows["decode step vs roofline"]["figures"]["roofline"]
    assert roofline["bound_ms"] > 0 and roofline["fraction"] > 0
    window = rows["vocoder window vs roofline"]["figures"]
    assert (window["path"], window["rows"], window["frames"]) == ("eager", 1, 325)
    assert window["bound_ms"] > 0 and 0 < window["fraction"] and window["gflop"] > 0
    assert rows["versions"]["figures"]["torch"]


def _raises(run: DoctorRun):
    raise RuntimeError("the device fell over\nsecond line")


def test_a_check_that_raises_fails_alone_and_flips_the_exit_code(monkeypatch):
    fine = ("fine", lambda run: verdict("fine", True, "held"))
    later = ("later", lambda run: skipped("later", "needs CUDA"))
    monkeypatch.setattr(doctor_checks, "CHECKS", [fine, ("broken", _raises), later])
    r = CliRunner().invoke(app, ["doctor", "--device", "cpu"])
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["ok"] is False
    assert [(c["name"], c["status"]) for c in report["doctor"]] == [
        ("fine", "ok"), ("broken", "failed"), ("later", "skipped")]  # fmt: skip
    assert report["doctor"][1]["detail"] == "RuntimeError: the device fell over"
    assert "Traceback" not in r.output and "failed: broken" in r.stderr


def test_skipped_is_fine_failed_is_not():
    import torch

    run = DoctorRun(torch.device("cpu"), "small")
    done = list(run_checks([("a", lambda r: skipped("a", "needs CUDA"))], run))
    assert all_held(done) and done[0].status == "skipped"
    done += list(run_checks([("b", _raises)], run))
    assert not all_held(done) and done[1].status == "failed"


def test_doctor_refuses_an_unknown_size():
    r = CliRunner().invoke(app, ["doctor", "--size", "7b"])
    assert r.exit_code == 2 and "--size" in r.output


def test_the_gpu_halves_of_the_agreement_checks_run_on_cpu_when_asked(monkeypatch):
    """Code that only CUDA reaches in `qtts doctor`, run here on the small dims: the teacher-forced
    comparison of the layer paths; and bf16 vs fp32 (teacher-forced, and the vocoder's audio), as
    a CPU with native bf16 runs them."""
    import torch

    from qtts.core.doctor.agreement import bf16_vs_fp32, layer_paths
    from qtts.core.doctor.vocoder_precision import BF16_AUDIO_MIN_SNR_DB, bf16_vocoder

    class CudaBranch(DoctorRun):
        cuda = True  # the branch a GPU takes, on CPU tensors

    paths = layer_paths(CudaBranch(torch.device("cpu"), "small"))
    assert paths.status == "ok", paths.detail
    assert paths.figures["teacher_forced"]["all"]["argmax_agreement"] == 1.0
    monkeypatch.setenv("QTTS_CPU_BF16", "1")  # a CPU whose --dtype auto is bf16
    bf16 = bf16_vs_fp32(DoctorRun(torch.device("cpu"), "small"))
    assert bf16.status == "ok", bf16.detail
    assert bf16.figures["all"]["sites"] > 0 and bf16.figures["all"]["worst_logit_rel_diff"] > 0
    audio = bf16_vocoder(DoctorRun(torch.device("cpu"), "small"))
    assert audio.status == "ok", audio.detail
    # not identical (bf16 did run), and within the bound
    assert BF16_AUDIO_MIN_SNR_DB <= audio.figures["snr_db"] < 80


def _vocoder_window_with_fake_graphs(monkeypatch, fail: bool):
    """The GPU branch of the vocoder window check on CPU, through a recording stand-in for CUDA
    graphs (or one whose captures fail): (the check's result, the shapes replayed)."""
    from types import SimpleNamespace

    import torch
    from tiny_models import fast_tiny_decode, tiny_decoder

    from qtts.core.doctor import vocoder_window as check
    from qtts.core.engine.plan.roofline import DeviceSpec
    from qtts.core.engine.vocoder import vocoder_graphs

    replays = []

    class FakeCudaGraphs:
        def __init__(self, device, capture_error_mode, stream=None):
            pass

        def warmup(self, window, key, steps):
            window(key)

        def capture(self, window, key):
            if fail:
                raise RuntimeError("operation not permitted when stream is capturing")
            return SimpleNamespace(replay=lambda: (replays.append(key), window(key)))

    monkeypatch.setattr(vocoder_graphs, "CudaGraphs", FakeCudaGraphs)
    graphed = SimpleNamespace(cuda_graphs=True, decoder_gemm=True, decoder_conv_choices=None)
    monkeypatch.setattr(check.EngineTuning, "for_device", lambda device: graphed)
    run = DoctorRun(torch.device("cpu"), "small")
    run.measured["models"] = (None, None, tiny_decoder())
    run.measured["spec"] = DeviceSpec("a stand-in", bandwidth=1e10, flops=1e11)
    with fast_tiny_decode():
        return check.vocoder_window(run), replays


def test_the_vocoder_window_replays_a_graph_where_graphs_run(monkeypatch):
    result, replays = _vocoder_window_with_fake_graphs(monkeypatch, fail=False)
    assert result.status == "ok" and result.figures["path"] == "graph replay", result.detail
    # The reserved shape is captured first, so even the first call replays; then the timed one.
    assert replays == [(1, 325), (1, 325)]


def test_a_vocoder_graph_that_fails_to_capture_fails_the_check(monkeypatch):
    result, replays = _vocoder_window_with_fake_graphs(monkeypatch, fail=True)
    assert result.status == "failed" and "capture failed" in result.detail, result.detail
    assert result.figures["path"] == "eager" and replays == []
    assert 0 < result.figures["fraction"] and result.figures["bound_by"] in ("memory", "compute")
