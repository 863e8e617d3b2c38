"""`qtts plan` (no GPU, no model allocated) and the refusal `qtts batch` gives for an explicit
--batch-size its memory plan cannot fit."""

import json

import pytest
from typer.testing import CliRunner

from qtts.cli.app import app
from qtts.core.engine.vocoder.vocoder_windows import bucket_shapes, frame_buckets

GIB = 2**30


def _plan(*args, exit_code: int = 0) -> tuple[str, dict]:
    r = CliRunner().invoke(app, ["plan", *map(str, args)])
    assert r.exit_code == exit_code, r.output
    return r.stdout, json.loads(r.stdout.strip().splitlines()[-1])


def test_a_1_7b_job_fits_an_80_gib_card_with_kv_sized_to_its_rows():
    out, plan = _plan("--size", "1.7b", "--gpu-memory", 80, "--batch-size", "auto",
                      "--text-tokens", 200)  # fmt: skip
    assert plan["fits"] is True and plan["total_bytes"] <= plan["gpu_bytes"] == 80 * GIB
    prompt, budget = 200 + 11, 100 + 8 * 200  # the prompt layout, and the default frame budget
    kv_len = 1920  # 1,911 positions, rounded up to 16-aligned views (engine.views.KV_ALIGN)
    assert [g["kv_len"] for g in plan["groups"]] == [kv_len] and prompt + budget == 1911
    slots = plan["slots"]  # 254: the vocoder's graphs (their pool) take what the rest would
    assert slots == 254 and plan["kv_bytes"] == slots * kv_len * 112 * 1024
    for key in ("weights_bytes", "vocoder_bytes"):
        assert 0 < plan[key] < plan["total_bytes"]
    # the parts add up to the total (state_bytes, kept as it was, includes kv_bytes)
    assert sum(plan["memory"].values()) == plan["total_bytes"]
    assert plan["memory"]["kv_cache"] + plan["memory"]["slot_state"] == plan["state_bytes"]
    assert "ceiling" in out and plan["roofline"]["ceiling_audio_s_per_s"] > 0
    # 15 vocoder rows: pieces of 1, 2, 4 and 8 rows, each at the 26 window lengths
    assert plan["vocoder_batch"] == 15 and plan["vocoder_graphs"] == 4 * len(frame_buckets())
    assert f"15 rows at once, at most {4 * 26} CUDA graphs" in out


def test_the_roofline_counts_launches_as_a_third_bound():
    """launches x the stated cost per launch, beside bytes and FLOPs; the lower bound is the
    largest of the three, and the ceiling follows from it."""
    _, plan = _plan("--size", "0.6b", "--gpu-memory", 80, "--text-tokens", 200)
    r = plan["roofline"]
    assert r["launches"] == 1185  # tests/unit/engine/test_launch_count.py pins the phases
    assert r["bound_ms"]["launches"] == pytest.approx(r["launches"] * r["launch_us"] / 1e3)
    assert r["lower_bound_ms"] == pytest.approx(max(r["bound_ms"].values()))
    assert r["decode_ceiling_audio_s_per_s"] == pytest.approx(
        r["slots"] * 0.08 / (r["lower_bound_ms"] / 1e3)
    )


def test_too_many_slots_for_a_24_gib_card_names_the_largest_that_fits():
    """Exit 2 as qtts batch would, the plan still printed, one Error line naming the size."""
    r = CliRunner().invoke(app, ["plan", "--size", "1.7b", "--gpu-memory", "24", "--batch-size",
                                 "256", "--text-tokens", "250"])  # fmt: skip
    plan = json.loads(r.stdout.strip().splitlines()[-1])
    n = plan["largest_batch_size_that_fits"]
    assert r.exit_code == 2 and plan["fits"] is False and 1 <= n < 256
    assert f"largest batch size that fits: {n}" in r.stdout
    errors = [x for x in r.stderr.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and f"the largest batch size that fits is {n}" in errors[0]
    _, smaller = _plan(
        "--size", "1.7b", "--gpu-memory", 24, "--batch-size", n, "--text-tokens", 250
    )
    assert smaller["fits"] is True


def test_plans_for_an_input_file(tmp_path):
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    lines = tmp_path / "lines.txt"
    lines.write_text("A short line.\n\nA much longer line of text, " * 3 + "\n")
    _, estimated = _plan(lines, "--size", "0.6b", "--gpu-memory", 24)
    assert estimated["fits"] and sum(g["rows"] for g in estimated["groups"]) == 4
    ck = make_tiny_checkpoint(tmp_path / "ck", seed=2)
    out, exact = _plan(lines, "--model", ck, "--gpu-memory", 24)
    assert "from the checkpoint's tokenizer" in out
    assert sum(g["rows"] for g in exact["groups"]) == 4


@pytest.mark.parametrize("args", [["--size", "2b"], [], ["--size", "0.6b", "--model", "x"]])
def test_bad_plan_options_are_one_line_errors(args):
    r = CliRunner().invoke(app, ["plan", *args])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_qtts_batch_refuses_a_batch_size_that_cannot_fit(tmp_path, write_manifest, monkeypatch):
    """Same plan as qtts plan, on the real (tiny) model: exit 2, one line naming the largest
    batch size that fits, nothing synthesized, every row still pending for a rerun."""
    import pyarrow.parquet as pq

    from qtts.core.synthesis import memory_plan
    from qtts.core.tiny.checkpoint import make_tiny_checkpoint

    monkeypatch.delenv("QTTS_FAKE_SYNTH", raising=False)
    monkeypatch.setattr(memory_plan, "device_budget", lambda device: 1070 * 2**20)
    ck = make_tiny_checkpoint(tmp_path / "ck", seed=1)
    rows = [{"id": f"r{i}", "text": f"Line {i} of the manifest."} for i in range(100)]
    out = tmp_path / "out"
    args = ["batch", write_manifest(rows), "-m", ck, "-o", out, "--device", "cpu",
            "--speaker", "vivian", "--max-new-tokens", 900]  # fmt: skip
    r = CliRunner().invoke(app, [*map(str, args), "--batch-size", "64"])
    assert r.exit_code == 2, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--batch-size 64 does not fit" in errors[0]
    assert "the largest batch size that fits is" in errors[0] and "Traceback" not in r.output
    assert not list(out.glob("*.wav"))
    statuses = {row["status"] for row in pq.read_table(out / "results.parquet").to_pylist()}
    assert statuses <= {"pending"} or not statuses


@pytest.mark.parametrize("gpu, memory", [("l4", 24), ("rtx4090", 24), ("a100-40", 40),
                                         ("h200", 141)])  # fmt: skip
def test_a_card_name_plans_for_its_memory_and_speed(gpu, memory):
    out, plan = _plan("--size", "0.6b", "--gpu", gpu, "--rows", 64)
    assert plan["gpu_bytes"] == memory * GIB and plan["gpu"] == gpu
    assert "length group" in out and "at the roofline ceiling: an upper bound" in out
    job = plan["job"]
    assert job["rows"] == 64 and job["hours_at_ceiling"] == pytest.approx(
        job["audio_hours"] / plan["roofline"]["ceiling_audio_s_per_s"]
    )


def test_the_vocoder_batch_never_exceeds_the_rows():
    _, plan = _plan("--size", "0.6b", "--rows", 4)
    assert plan["vocoder_batch"] <= 4
    assert plan["vocoder_graphs"] == len(bucket_shapes(plan["vocoder_batch"]))


def test_the_ceiling_counts_the_vocoder_beside_the_decode_step():
    _, plan = _plan("--size", "1.7b", "--text-tokens", 200)
    r = plan["roofline"]
    assert r["vocoder_flops_per_audio_s"] > 5e10 and r["vocoder_bytes_per_audio_s"] > 1e9
    # one GPU's time per audio-second is the decode step's plus the vocoder's
    assert 1 / r["ceiling_audio_s_per_s"] == pytest.approx(
        1 / r["decode_ceiling_audio_s_per_s"] + 1 / r["vocoder_ceiling_audio_s_per_s"]
    )
    assert r["ceiling_audio_s_per_s"] < r["decode_ceiling_audio_s_per_s"]
    assert plan["job"]["hours_at_ceiling"] == pytest.approx(
        plan["job"]["audio_hours"] / r["ceiling_audio_s_per_s"]
    )


def test_the_plan_names_its_graphs_and_a_short_job_in_seconds():
    """qtts plan says how many graphs a job captures (the decode step's, one per KV view of each
    pass; the vocoder's at most, as the rows first need them) and gives a job's duration in the
    unit that shows it: 64 short rows on an H200 take seconds, not "0.00 h"."""
    out, plan = _plan("--size", "0.6b", "--gpu", "h200", "--rows", 64)
    assert plan["decode_graphs"] == sum(g["graphs"] for g in plan["groups"]) >= 1
    line = next(x for x in out.splitlines() if x.startswith("one-time work:"))
    assert f"{plan['decode_graphs']} decode-step CUDA graph" in line
    assert f"at most {plan['vocoder_graphs']}" in line
    seconds = plan["job"]["seconds_at_ceiling"]
    assert seconds == pytest.approx(plan["job"]["hours_at_ceiling"] * 3600) and seconds < 60
    assert f"at least {seconds:.1f} s on one H200" in out and "0.00 h" not in out


def test_durations_take_the_unit_that_shows_them():
    from qtts.core.capacity.job_fit import duration

    assert [duration(s) for s in (41.25, 750, 11_520)] == ["41.2 s", "12.5 min", "3.20 h"]
