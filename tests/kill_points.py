"""Run `qtts` and kill it (os._exit(9): no cleanup, no flush, as a kill -9) at a chosen moment:
the Nth call of a named function, before it runs or just after it returns.

    python tests/kill_points.py MODULE:ATTR[.METHOD] N before|after -- batch ...

The function is replaced where it is looked up (the module attribute the code calls through),
so a test names the module that calls it. Used with the fake model (fakes.fake_env)."""

from __future__ import annotations

import functools
import importlib
import os
import runpy
import sys
import threading


def arm(target: str, n: int, when: str) -> None:
    module_name, _, path = target.partition(":")
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    calls, counting = 0, threading.Lock()

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        nonlocal calls
        with counting:  # writer threads call in parallel: each call knows its own number
            calls += 1
            mine = calls
        if mine == n and when == "before":
            os._exit(9)
        result = original(*args, **kwargs)
        if mine == n and when == "after":
            os._exit(9)
        return result

    setattr(owner, name, wrapped)


if __name__ == "__main__":
    target, n, when, sep, *args = sys.argv[1:]
    assert sep == "--" and when in ("before", "after"), sys.argv
    arm(target, int(n), when)
    sys.argv = ["qtts", *args]
    runpy.run_module("qtts", run_name="__main__", alter_sys=True)
