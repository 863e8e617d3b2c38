"""The rule that merges the command line's sampling overrides into a checkpoint's generation
defaults, and the range checks on the result. Generic over SamplingParams' fields: a sampling
parameter added there needs no line here."""

from __future__ import annotations

from dataclasses import replace

from qtts.core.errors import UsageError
from qtts.core.jobs.spec import SUBTALKER, SamplingOverrides
from qtts.core.model.config import GenerationDefaults, SamplingParams
from qtts.core.synthesis.requests import GenerationOptions


def generation_options(defaults: GenerationDefaults, o: SamplingOverrides) -> GenerationOptions:
    """The checkpoint's defaults, overridden by whatever the command line set."""
    talker = _site(defaults.talker, o.talker, greedy=o.greedy, flag_prefix="--")
    sub = _site(
        defaults.subtalker, o.subtalker, greedy=o.greedy, flag_prefix="--" + _flag(SUBTALKER)
    )
    return GenerationOptions(talker=talker, subtalker=sub)


def _site(default: SamplingParams, given, *, greedy: bool, flag_prefix: str) -> SamplingParams:
    params = replace(default, **given)
    if greedy:
        params = replace(params, do_sample=False)
    for name, valid in params.out_of_range():
        raise UsageError(f"{flag_prefix}{_flag(name)} {valid}")
    return params


def _flag(name: str) -> str:
    return name.replace("_", "-")
