"""One engine driver: the source builds an engine in one module and runs the slot scheduler's loop
from one, the driver (core/synthesis/engine_driver.py), so a change to how a pass runs (captures,
drain, vocoder overlap) is made once. The synthesizer, the bench, the doctor and the launch
counter call it; the tests may drive engines directly."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = ("cli", "core", "kernels", "pkg", "tools", "examples")
DRIVER = "core/synthesis/engine_driver.py"
BUILT_FROM = {"Engine", "SlotState", "GraphedDecodeStep"}  # called: an engine assembled
LOOP = {"run_continuous"}  # named anywhere: called, imported, or handed on


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.alias):
        return node.name.rsplit(".", 1)[-1]
    return None


def _modules(paths, *, calling=frozenset(), naming=frozenset(), root=REPO) -> set[str]:
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            called = _name(node.func) if isinstance(node, ast.Call) else None
            if called in calling or _name(node) in naming:
                found.add(str(path.relative_to(root)))
    return found


def _source() -> list[Path]:
    return [p for folder in SOURCE for p in (REPO / folder).rglob("*.py")]


def test_the_engine_is_built_by_the_driver_only():
    assert _modules(_source(), calling=BUILT_FROM) == {DRIVER}


def test_the_scheduler_loop_runs_from_the_driver_only():
    assert _modules(_source(), naming=LOOP) == {DRIVER}


def test_a_module_that_builds_or_runs_an_engine_is_seen(tmp_path):
    """The scan can fail: an engine, its slot state or its graphs made by hand are seen, and the
    loop called, imported under another name or handed on; a type annotation is not."""
    probes = {
        "engine.py": "engine = Engine(model, config, state, pad, tuning)\n",
        "graphs.py": "import graphs\nstep = graphs.GraphedDecodeStep(engine, views)\n",
        "typed.py": "def f(engine: Engine, state: SlotState) -> None: ...\n",
        "call.py": "run_continuous(engine, requests)\n",
        "alias.py": "from qtts.core.engine.loop.scheduler import run_continuous as go\n",
        "handed.py": "import s\nloops = [s.run_continuous]\n",
    }
    for name, text in probes.items():
        (tmp_path / name).write_text(text)
    paths = sorted(tmp_path.glob("*.py"))
    assert _modules(paths, calling=BUILT_FROM, root=tmp_path) == {"engine.py", "graphs.py"}
    assert _modules(paths, naming=LOOP, root=tmp_path) == {"call.py", "alias.py", "handed.py"}
