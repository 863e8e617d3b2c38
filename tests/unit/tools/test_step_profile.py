"""tools/step_profile.py runs end to end on a CPU (the small model, one slot, one step each
way): it prints its table and a JSON line with the step's time and its top operators, each
share of the step at most 1 and the shares summing to at most 1. Plumbing only: the kernel
figures it exists for come from a GPU (tools/gpu_checks.sh)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SHARE_SLACK = 1e-3  # the shares are rounded to 4 decimals each


def test_the_step_profile_runs_on_cpu(capsys):
    spec = importlib.util.spec_from_file_location(
        "step_profile", REPO / "tools" / "step_profile.py"
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    tool.main(["--size", "small", "--slots", "1", "--steps", "1", "--device", "cpu",
               "--dtype", "float32"])  # fmt: skip
    out = capsys.readouterr().out
    got = json.loads(out.strip().splitlines()[-1])
    assert (got["size"], got["slots"]) == ("small", 1) and got["view"] > 0
    assert got["eager_step_ms"] > 0 and "graph" not in got  # no graphs on a CPU
    top = got["eager"]["top"]
    assert 0 < len(top) <= tool.TOP and got["eager"]["launches_per_step"] >= len(top)
    assert all(r["us"] > 0 and 0 < r["share"] <= 1 for r in top)
    assert sum(r["share"] for r in top) <= 1 + SHARE_SLACK
    assert [r["us"] for r in top] == sorted((r["us"] for r in top), reverse=True)
    assert "operator calls per step" in out  # a CPU's table names operators, not kernels
