"""tools/output_cost.py publishes the same rows through every layout and counts what lands."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[5]


def test_the_tool_reports_each_layouts_files(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("output_cost", REPO / "tools" / "output_cost.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--rows", "5", "--seconds", "0.1", "--shard-rows", "2",
                      "--work-dir", str(tmp_path)]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert [report[k]["files"] for k in ("files", "webdataset", "parquet")] == [5, 3, 3]
    wav_bytes = 44 + 2 * 2400  # a 0.1 s 16-bit WAV
    assert report["files"]["bytes_per_row"] == wav_bytes
    assert report["webdataset"]["bytes_per_row"] > wav_bytes  # tar headers and the .json member
