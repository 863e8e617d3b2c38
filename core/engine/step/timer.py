"""The engine's timing hook: the parts of prefill and of a decode step it marks as they run.

`Engine.timer` is None by default; each mark then costs one attribute check, and nothing reaches
a traced or captured step. A timer set on an engine is entered around each part (its `part(name)`
is a context manager), so the bench times parts of the engine's own steps instead of patching
them. Parts nest: "sampling" runs inside "prefill", "predictor" and "decode_step"; "talker_stack"
and "predictor" inside "decode_step". What a timer measures is its own business (the bench's
core/bench/part_clock.py syncs the device at each edge and counts nested time once). A timer is
for eager steps: set none while decode graphs are captured.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

PARTS = ("prefill", "decode_step", "talker_stack", "predictor", "sampling")


class StepTimer(Protocol):
    def part(self, name: str) -> AbstractContextManager: ...
