"""Every parameter in qtts.core.jobs says its type: each argument of every function and method
(positional, keyword-only, *args and **kwargs; self and cls excepted) has an annotation. A type
that lives in a higher folder comes in as a Protocol of the lower module, never as an import up
the folder order (tests/unit/test_architecture.py)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "core" / "jobs"

# Parameters left untyped, as file:function:param, each with its reason (none now).
UNTYPED: set[str] = set()


def _untyped(source: str, name: str) -> set[str]:
    """`name:function:param` of each unannotated parameter in `source` (self and cls excepted)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        every = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
        for arg in every:
            if arg.annotation is None and arg.arg not in ("self", "cls"):
                found.add(f"{name}:{node.name}:{arg.arg}")
    return found


def _jobs_untyped() -> set[str]:
    found = set()
    for path in sorted(JOBS.rglob("*.py")):
        found |= _untyped(path.read_text("utf-8"), str(path.relative_to(REPO)))
    return found


def test_every_jobs_parameter_is_typed():
    untyped = _jobs_untyped()
    assert untyped - UNTYPED == set(), "\n".join(sorted(untyped - UNTYPED))


def test_the_allow_list_names_only_untyped_parameters():
    """An entry typed since is taken off the list."""
    assert UNTYPED - _jobs_untyped() == set()


def test_an_untyped_parameter_is_seen():
    """The check can fail: each kind of parameter left bare is found; self and cls are not."""
    source = """
class A:
    def f(self, a, b: int, /, c, *args, d, e: str = "", **kwargs) -> None: ...

    @classmethod
    def g(cls, x: int) -> None: ...


async def h(y, z: float) -> None:
    def inner(w) -> None: ...
"""
    assert _untyped(source, "m.py") == {
        "m.py:f:a",
        "m.py:f:c",
        "m.py:f:args",
        "m.py:f:d",
        "m.py:f:kwargs",
        "m.py:h:y",
        "m.py:inner:w",
    }
    assert _untyped("def f(a: int, *b: str, **c: object) -> None: ...", "m.py") == set()
