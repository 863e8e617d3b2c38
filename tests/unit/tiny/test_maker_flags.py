"""examples/make_tiny_checkpoint.py: EOS by text is its default (the README's commands need no
--max-new-tokens), and --no-eos-by-text still makes the never-stopping checkpoint that fixed-length
tools ask for (tools/compare_official_cpu.py, tools/job_check.py, tools/ray_vs_local.sh)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

MAKER = Path(__file__).resolve().parents[3] / "examples" / "make_tiny_checkpoint.py"


@pytest.fixture(scope="module")
def maker():
    spec = importlib.util.spec_from_file_location("make_tiny_checkpoint", MAKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_eos_by_text_is_the_default_and_can_be_turned_off(maker):
    assert maker.parse_args(["out"]).eos_by_text is True
    assert maker.parse_args(["out", "--eos-by-text"]).eos_by_text is True
    assert maker.parse_args(["out", "--no-eos-by-text"]).eos_by_text is False


def test_the_flag_reaches_the_checkpoint_maker(maker, monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(maker, "make_tiny_checkpoint", lambda out, **kw: seen.append(kw) or out)
    maker.main([str(tmp_path / "a")])
    maker.main([str(tmp_path / "b"), "--no-eos-by-text", "--greedy"])
    assert [kw["stop_by_text"] for kw in seen] == [True, False]
    assert [kw["greedy"] for kw in seen] == [False, True]


@pytest.mark.parametrize("tool", ["compare_official_cpu.py", "ray_vs_local.sh"])
def test_fixed_length_tools_ask_for_the_never_stopping_checkpoint(tool):
    text = (MAKER.parents[1] / "tools" / tool).read_text("utf-8")
    assert "make_tiny_checkpoint.py" in text and "--no-eos-by-text" in text
