"""The rule that merges the command line's sampling overrides into a checkpoint's generation
defaults, the range checks on the result, and the one warning for drawing flags that a site which
does not sample ignores. Generic over SamplingParams' fields: a sampling parameter added there
needs no line here (its field says whether it only shapes a draw)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import fields, replace

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.spec import SUBTALKER, SamplingOverrides
from qtts.core.model.config import GenerationDefaults, SamplingParams
from qtts.core.synthesis.requests import GenerationOptions

log = logging.getLogger("qtts")

# Fields that only shape a random draw: the argmax ignores them (the repetition penalty is
# applied before either, so it is not one of them).
DRAWING = tuple(f.name for f in fields(SamplingParams) if f.metadata["drawing"])
SITES = (  # (site, its flags' prefix, its generation_config.json key for do_sample)
    ("talker", "--", "do_sample"),
    ("subtalker", "--" + SUBTALKER.replace("_", "-"), "subtalker_dosample"),
)


def generation_options(defaults: GenerationDefaults, o: SamplingOverrides) -> GenerationOptions:
    """The checkpoint's defaults, overridden by whatever the command line set; says once (a
    warning) which drawing flags change nothing because their site does not sample."""
    talker = _site(defaults.talker, o.talker, flag_prefix=SITES[0][1])
    sub = _site(defaults.subtalker, o.subtalker, flag_prefix=SITES[1][1])
    idle = idle_flags_warning(o, GenerationOptions(talker=talker, subtalker=sub))
    if idle:
        log.warning(idle)
    return GenerationOptions(talker=talker, subtalker=sub)


def idle_flags_warning(o: SamplingOverrides, options: GenerationOptions) -> str | None:
    """One line naming every drawing flag given to a site that takes the argmax, and what made it
    (--greedy, or generation_config.json); None when there is none."""
    idle, keys = [], []
    for (site, prefix, key), params in zip(SITES, (options.talker, options.subtalker), strict=True):
        given = getattr(o, site)
        flags = [f"{prefix}{_flag(n)}" for n in DRAWING if n in given]
        if flags and not params.do_sample:
            idle += flags
            keys += [] if "do_sample" in given else [f"{key}: false"]
    if not idle:
        return None
    said = f"{', '.join(idle)} change(s) nothing"
    if not keys:  # --greedy turned both sites off
        return f"--greedy takes the argmax: {said}"
    why = f"the checkpoint takes the argmax (generation_config.json {', '.join(keys)})"
    return f"{why}: {said}; --sample turns sampling on"


def _site(
    default: SamplingParams, given: Mapping[str, float | int | bool], *, flag_prefix: str
) -> SamplingParams:
    params = replace(default, **given)
    for name, valid in params.out_of_range():
        raise UsageError(f"{flag_prefix}{_flag(name)} {valid}")
    return params


def _flag(name: str) -> str:
    return name.replace("_", "-")
