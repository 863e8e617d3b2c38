"""`qtts bench` runs end to end on CPU and ends with one JSON line (no timing is asserted)."""

import json
import subprocess
import sys

SPLIT_COVERAGE = 0.8  # least share of the step's wall time its parts must account for
ROUNDING_S = 2e-3  # two figures rounded to the millisecond, added


def test_bench_small_cpu_prints_table_and_json():
    proc = subprocess.run(
        [sys.executable, "-m", "qtts", "bench", "--size", "small", "--batch-sizes", "2",
         "--frames", "6", "--requests", "3", "--device", "cpu", "--compare"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    packed, eager = report["bench"]  # --compare on CPU: the default packed path, then eager
    assert packed["mode"] == "packed" and eager["mode"] == "eager"
    row = packed
    assert row["batch"] == 2 and row["requests"] == 3
    assert row["audio_s"] == 3 * 6 * 1920 / 24000  # every request ran the fixed length
    assert row["audio_s_per_s"] > 0 and set(row["phases_s"]) >= {"prefill", "vocoder"}
    # the measures' cost, timed apart from the run (a job computes them on its writer threads)
    assert "measures" not in row["phases_s"]
    assert 0 < row["measures_s_per_audio_s"] < row["wall_s"] / row["audio_s"]
    assert any(line.strip().startswith("measures (") for line in proc.stdout.splitlines())
    parts = row["step_ms"]["parts"]  # the step split into parts that add up to it
    assert row["step_ms"]["step"] > 0
    covered = parts["talker_stack"] + parts["predictor"] + parts["sampling"] + parts["other"]
    assert (
        SPLIT_COVERAGE * parts["instrumented_step"] <= covered <= parts["instrumented_step"] + 1e-3
    )
    assert eager["audio_s"] == row["audio_s"]
    for r in report["bench"]:  # the step's roofline on this machine, measured
        assert r["roofline"]["bound_ms"] > 0 and r["roofline"]["fraction"] > 0
        assert "measured" in r["roofline"]["device"]
    assert any("audio-s/s" in line for line in lines[:-1])  # the table
    # each figure says what it is: the plain step, and the instrumented one from further steps
    assert any("(plain decode step, unsynced, mean of 5)" in line for line in lines[:-1])
    assert any(
        line.strip().startswith("instrumented step:") and "further steps" in line
        for line in lines[:-1]
    )
    assert row["step_ms"]["repeats"] == 5
    assert any("packed / eager:" in line for line in lines[:-1])  # the side-by-side ratio
    # where the time went around the run: decoding and the drain after it make up the run;
    # a CPU's vocoder runs eagerly, so no window graph is met
    split = row["time_split"]
    assert set(split) == {"start_s", "build_s", "vocoder_graphs", "vocoder_graphs_s",
                          "decoding_s", "drain_s"}  # fmt: skip
    assert abs(split["decoding_s"] + split["drain_s"] - row["wall_s"]) <= ROUNDING_S
    assert split["build_s"] > 0 and split["vocoder_graphs"] == 0


def test_bench_rejects_bad_batch_sizes():
    proc = subprocess.run([sys.executable, "-m", "qtts", "bench", "--batch-sizes", "0,x"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_bench_auto_takes_the_memory_plans_batch_size():
    """Also: without --size a CPU times the small dims, and says so (0.6b takes minutes)."""
    proc = subprocess.run(
        [sys.executable, "-m", "qtts", "bench", "--batch-sizes", "auto",
         "--frames", "4", "--requests", "5", "--device", "cpu", "--no-write"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "--size auto is small on a CPU" in proc.stderr
    (row,) = json.loads(proc.stdout.strip().splitlines()[-1])["bench"]
    assert row["size"] == "small"
    assert row["auto"] is True and row["batch"] == 5  # all 5 requests fit: the plan takes them all
    assert row["audio_s"] == 5 * 4 * 1920 / 24000


def test_bench_counts_launches_without_a_gpu():
    proc = subprocess.run(
        [sys.executable, "-m", "qtts", "bench", "--size", "0.6b", "--count-launches",
         "--batch-sizes", "64"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout.strip().splitlines()[-1])["launches"]
    assert row["batch"] == 64 and row["launches_per_step"] <= 1500
    assert sum(row["phases"].values()) == row["launches_per_step"]
    assert row["module_path_launches"] > 4 * row["launches_per_step"]  # what fusing saved
    assert row["prefill_prompts"] == 64 and row["prefill_launches_per_layer_pass"] <= 12
    assert sum(row["prefill_phases"].values()) == row["prefill_launches"]
    assert row["module_path_prefill_launches_per_layer_pass"] > 6 * 10


def test_each_step_figure_says_what_it_is():
    """The figures of the issue (a loaded 2-core box): on a CPU nothing is synced, both sets of
    steps time the same work, so a 12x gap is the machine's load and the report says so; on a
    GPU the instrumented steps carry a sync at each part, so a gap is expected and not flagged."""
    from qtts.core.bench.lines import step_line as _step_line

    parts = {"talker_stack": 80.1, "predictor": 700.2, "sampling": 110.0, "other": 9.45}
    step_ms = {"step": 73.68, "parts": {**parts, "instrumented_step": 899.75}, "repeats": 5}
    cpu = _step_line(step_ms, synced=False).splitlines()
    assert cpu[0].strip() == "step: 73.68 ms (plain decode step, unsynced, mean of 5)"
    assert cpu[1].strip().startswith("instrumented step: 899.75 ms = talker_stack 80.10 + ")
    assert "5 further steps" in cpu[1] and "no sync on a CPU" in cpu[1]
    assert "differ 12.2x for the same work: the machine was busy" in cpu[2]
    gpu = _step_line({**step_ms, "graph_step": 5.64}, synced=True).splitlines()
    assert "graph replay 5.64 ms (mean of 5)" in gpu[0] and len(gpu) == 2
    assert "synced at each part: sync overhead included" in gpu[1]
    assert "not to the step above" in gpu[1]
    calm = {**step_ms, "step": 850.0}
    assert len(_step_line(calm, synced=False).splitlines()) == 2


def test_bench_splits_the_decode_loop_from_the_vocoder():
    """The loop's own time per step and the tail after its last step; --no-vocoder decodes the
    same steps with nothing beside them (how the H200's loop was found to be the vocoder's)."""

    def bench(*extra):
        proc = subprocess.run(
            [sys.executable, "-m", "qtts", "bench", "--size", "small", "--batch-sizes", "2",
             "--frames", "6", "--requests", "3", "--device", "cpu", *extra],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        (row,) = json.loads(proc.stdout.strip().splitlines()[-1])["bench"]
        assert any(line.strip().startswith("decode loop: ") for line in proc.stdout.splitlines())
        return row

    both, alone = bench(), bench("--no-vocoder")
    assert both["vocoder"] is True and alone["vocoder"] is False
    # 3 rows on 2 slots, 6 frames each (EOS suppressed): two passes of the slots
    assert both["steps"] == alone["steps"] >= 2 * 6
    assert both["audio_s"] == alone["audio_s"] == 3 * 6 * 1920 / 24000
    assert both["phases_s"]["vocoder"] > 0 and alone["phases_s"]["vocoder"] == 0
    assert alone["measures_s_per_audio_s"] == 0  # no audio to measure
    for row in (both, alone):
        assert 0 < row["loop_ms_per_step"] * row["steps"] / 1e3 <= row["wall_s"]
        assert 0 <= row["tail_s"] <= row["wall_s"]
    # inline on a CPU, the last group is vocoded after its hand-over: that is the tail
    assert both["tail_s"] > alone["tail_s"]
