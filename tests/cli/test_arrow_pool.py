"""The qtts process's Arrow pool: jemalloc (it returns freed memory), unless the environment
chose one. Run in fresh interpreters: a pool is chosen once per process."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

SHOW = "import pyarrow as pa; import qtts.cli.app as m; "


def _pool(env_pool: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env_pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = env_pool
    code = SHOW + "print(m.use_returning_pool(), pa.default_memory_pool().backend_name)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_jemalloc_where_pyarrow_has_it():
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow has no jemalloc")
    assert _pool(None) == ["jemalloc", "jemalloc"]


def test_the_environments_pool_stands():
    assert _pool("system") == ["system", "system"]


def test_the_command_line_chooses_it_first(monkeypatch):
    from qtts.cli import app

    calls = []
    monkeypatch.setattr(app, "use_returning_pool", lambda: calls.append(1) or "x")
    monkeypatch.setattr(sys, "argv", ["qtts", "--version"])
    with pytest.raises(SystemExit):
        app.main()
    assert calls == [1]
