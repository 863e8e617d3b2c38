"""The README's reading-back snippets, run as written on an out dir of each archive layout: the
webdataset library, Hugging Face datasets (before 4.0) and lhotse read what qtts wrote."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fakes import fake_env, qtts_cmd

README = Path(__file__).resolve().parents[2] / "README.md"
LAYOUTS = {"webdataset": "webdataset", "parquet": "datasets", "shar": "lhotse"}  # -> its reader


def snippets() -> dict[str, str]:
    """The README's python blocks that read out/data, by the layout their first line names."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), flags=re.S)
    found = {}
    for block in blocks:
        head = block.splitlines()[0]
        for layout in LAYOUTS:
            if f"--output {layout}" in head:
                found[layout] = block
    return found


def test_the_readme_has_a_snippet_per_archive_layout():
    assert set(snippets()) == set(LAYOUTS)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_readme_snippet_reads_the_archives_back(tmp_path, layout):
    pytest.importorskip(LAYOUTS[layout])
    ids = ["a1", "book1.ch2", "c3"]
    manifest = tmp_path / "m.parquet"
    pq.write_table(pa.table({"id": ids, "text": ["One.", "Two two.", "Three."]}), manifest)
    run = subprocess.run(
        qtts_cmd("batch", manifest, "--model", "fake-0.6b", "--speaker", "vivian", "-o",
                 tmp_path / "out", "-q", "--output", layout, "--shard-rows", 2),
        capture_output=True, text=True, env=fake_env(), timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    env = fake_env(HF_DATASETS_CACHE=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1")
    read = subprocess.run([sys.executable, "-c", snippets()[layout]], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert read.returncode == 0, read.stderr
    lines = read.stdout.strip().splitlines()
    if layout != "parquet":
        assert sorted(line.split()[0] for line in lines) == sorted(ids)
        assert all(" 24000 " in line for line in lines)
    else:
        assert lines[0].split()[0] in ids and " 24000 " in lines[0]
