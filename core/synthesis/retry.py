"""Rows that hit their frame budget, tried again: which attempt a row is on, and its next one.

A row whose codes run to its frame budget without EOS is, with a sampling checkpoint, most often
a runaway (babbling, or speech that never ends); another draw usually stops. With
GenerationOptions.max_attempts > 1 the synthesizer runs such a row again, up to that many tries,
each drawn with requests.attempt_seed(row seed, attempt): a pure function, so the attempts a row
takes and the codes it keeps depend only on the row, its seed and the tuning, never on its
batch. The first attempt is the request itself, so a row that stops at once is synthesized
exactly as without retries. Both generators (the engine's passes and the naive one) follow this
rule; the engine itself knows none of it.
Knows requests and attempt numbers; no tensors, no files.
"""

from __future__ import annotations

from dataclasses import dataclass

from qtts.core.synthesis.requests import Request, attempt_seed


@dataclass(frozen=True)
class Attempt:
    """One try of request `row` (its index in the synthesize call)."""

    row: int
    number: int  # 1-based
    seed: int  # attempt_seed(request seed, number)

    @classmethod
    def first(cls, row: int, request: Request) -> Attempt:
        return cls(row, 1, request.seed)

    def after(self, request: Request, hit_budget: bool, max_attempts: int) -> Attempt | None:
        """The next try of this row, or None when this one is kept (it stopped by EOS, or it was
        the last allowed)."""
        if not hit_budget or self.number >= max_attempts:
            return None
        number = self.number + 1
        return Attempt(self.row, number, attempt_seed(request.seed, number))
