"""The segment limit a job runs with, settled against the model's frame budget.

A limit the user gave (--max-segment-tokens) is the user's call: refused when the model cannot
speak a segment that long. The default (50 tokens) was chosen for the published checkpoints; a
checkpoint whose generation config allows fewer frames gets the longest limit it can speak, said
in one log line, so a default run never fails on a value the user did not set.
Knows the split options and the budget rules; no model, no tensors.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.work.budget import FrameBudget

log = logging.getLogger("qtts")


def settle_segment_limit(split: SplitOptions, budget: FrameBudget) -> SplitOptions:
    """split with its limit set: the one given (UsageError when a segment that long does not fit
    the budget), or the default lowered to the longest segment that does."""
    if not split.enabled:
        return split
    given = split.max_segment_tokens
    if given is not None:
        why = budget.too_long(given)
        if why is not None:
            raise UsageError(
                f"--max-segment-tokens {given} is more than this model can speak in one "
                f"segment ({_numbers(why)}); lower it"
            )
        return split
    default = split.limit
    fits = next((n for n in range(default, 0, -1) if budget.too_long(n) is None), None)
    if fits is None:
        raise UsageError(
            f"this model cannot speak even a one-token segment ({_numbers(budget.too_long(1))})"
        )
    if fits < default:
        log.info(
            "--max-segment-tokens %d: the default %d is more than this model can speak in one "
            "segment (%s); set --max-segment-tokens to choose",
            fits,
            default,
            _numbers(budget.too_long(default)),
        )
    return replace(split, max_segment_tokens=fits)


def _numbers(why: str) -> str:
    """A too_long reason's numbers, without its label and advice."""
    return why.split(": ", 1)[-1].split("; ")[0]
