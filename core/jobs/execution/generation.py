"""The rule that merges the command line's sampling overrides into a checkpoint's generation
defaults, and the range checks on the result."""

from __future__ import annotations

from qtts.core.errors import UsageError
from qtts.core.jobs.spec import SamplingOverrides
from qtts.core.model.config import GenerationDefaults, SamplingParams
from qtts.core.synthesis.requests import GenerationOptions


def generation_options(defaults: GenerationDefaults, o: SamplingOverrides) -> GenerationOptions:
    """The checkpoint's defaults, overridden by whatever the command line set."""

    def pick(value, default):
        return default if value is None else value

    talker = SamplingParams(
        do_sample=defaults.talker.do_sample and not o.greedy,
        temperature=pick(o.temperature, defaults.talker.temperature),
        top_k=pick(o.top_k, defaults.talker.top_k),
        top_p=pick(o.top_p, defaults.talker.top_p),
        repetition_penalty=pick(o.repetition_penalty, defaults.talker.repetition_penalty),
    )
    subtalker = SamplingParams(
        do_sample=defaults.subtalker.do_sample and not o.greedy,
        temperature=pick(o.subtalker_temperature, defaults.subtalker.temperature),
        top_k=pick(o.subtalker_top_k, defaults.subtalker.top_k),
        top_p=pick(o.subtalker_top_p, defaults.subtalker.top_p),
        repetition_penalty=defaults.subtalker.repetition_penalty,
    )
    for name, p in (("talker", talker), ("subtalker", subtalker)):
        _check_sampling(name, p)
    return GenerationOptions(talker=talker, subtalker=subtalker)


def _check_sampling(name: str, p: SamplingParams) -> None:
    prefix = "--" if name == "talker" else "--subtalker-"
    if p.temperature <= 0:
        raise UsageError(f"{prefix}temperature must be > 0 (use --greedy for argmax)")
    if p.top_k < 0:
        raise UsageError(f"{prefix}top-k must be >= 0 (0 turns it off)")
    if not 0 < p.top_p <= 1:
        raise UsageError(f"{prefix}top-p must be in (0, 1]")
    if p.repetition_penalty <= 0:
        raise UsageError("--repetition-penalty must be > 0 (1.0 turns it off)")
