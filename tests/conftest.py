"""Shared fixtures: Parquet manifests, the fake model (tests/fakes.py) for in-process and
subprocess CLI runs. tests/ is on sys.path (rootdir conftest), so tests `import fakes` directly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fakes import fake_env, qtts_cmd

# `--dtype auto` on a CPU picks bf16 where the CPU multiplies it natively; the suite pins float32
# so that what it asserts does not depend on the CI machine's CPU (the tests of the choice itself
# set this knob or pass the flags). Subprocess runs inherit it.
os.environ["QTTS_CPU_BF16"] = "0"
# Hugging Face datasets reads archives qtts wrote; it must never reach for the Hub (CI has only the
# package registries). Set before anything imports it: it reads this once, at import.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _graphs_not_broken():
    """A test that fails a capture on purpose turns graphs off for its process
    (qtts.core.engine.loop.graphs.capture_broken): the next test starts with them on."""
    yield
    graphs = sys.modules.get("qtts.core.engine.loop.graphs")
    if graphs is not None:
        graphs._capture_broken = None


@pytest.fixture
def write_manifest(tmp_path):
    """write_manifest(rows, name="m.parquet", schema=None) -> path of a Parquet manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(rows: list[dict], name: str = "m.parquet", schema=None):
        path = tmp_path / name
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
        return path

    return write


@pytest.fixture
def fake_model(monkeypatch):
    """In-process CLI runs (CliRunner) use the fake model."""
    monkeypatch.setenv("QTTS_FAKE_SYNTH", "fakes")
    for key in ("QTTS_FAKE_DELAY", "QTTS_FAKE_LOAD_FAIL", "QTTS_FAKE_MAX_NEW_TOKENS", "QTTS_DEBUG"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def run_qtts():
    """run_qtts(*args, input=None, **env) -> CompletedProcess of `python -m qtts ...`."""

    def run(*args, input: bytes | None = None, timeout: float = 60, **env: str):
        return subprocess.run(
            qtts_cmd(*args), input=input, capture_output=True, env=fake_env(**env), timeout=timeout
        )

    return run
