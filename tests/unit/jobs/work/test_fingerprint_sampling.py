"""Every sampling option reaches the fingerprint: a rerun with any of them changed redoes its
rows. The sampling sites are read from SamplingParams' fields, so a field added there is in the
fingerprint with no second list to keep in step."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from qtts.cli.job_options import sampling_options
from qtts.core.jobs.contract.spec import SUBTALKER, SamplingOverrides
from qtts.core.jobs.execution.generation import generation_options
from qtts.core.jobs.work.fingerprint import job_fingerprint
from qtts.core.model.config import GenerationDefaults, SamplingParams
from qtts.core.synthesis.requests import GenerationOptions

DEFAULTS = GenerationDefaults()  # the official hard defaults: both sites sample


def _digest(options: GenerationOptions) -> str:
    return job_fingerprint(model="m", precision="float32", options=options, max_new_tokens=None,
                        audio_format="wav").digest  # fmt: skip


OPTIONS = list(inspect.signature(sampling_options).parameters)  # the command line's, by name


def _changed(name: str):
    """A value for this option that differs from every default it could replace."""
    if name == "greedy":
        return True
    return 7 if "top_k" in name else 0.55  # temperatures, top_p, repetition penalty


def test_each_command_line_option_names_a_sampling_field():
    """The overrides are keyed by SamplingParams' field names, so the merge needs no list."""
    fields = {f.name for f in dataclasses.fields(SamplingParams)}
    for name in OPTIONS:
        assert name == "greedy" or name.removeprefix(SUBTALKER) in fields, name


@pytest.mark.parametrize("name", OPTIONS)
def test_each_sampling_option_changes_the_fingerprint(name):
    base = _digest(generation_options(DEFAULTS, SamplingOverrides()))
    overrides = sampling_options(**{name: _changed(name)})  # as the command line builds them
    assert _digest(generation_options(DEFAULTS, overrides)) != base


def test_an_option_reaches_its_own_site():
    options = generation_options(DEFAULTS, SamplingOverrides.from_flags(subtalker_top_k=7))
    assert options.subtalker.top_k == 7 and options.talker.top_k == DEFAULTS.talker.top_k


def test_a_field_added_to_the_sampling_params_is_in_the_fingerprint():
    Extended = dataclasses.make_dataclass(  # noqa: N806 -- a class
        "Extended", [("min_p", float, 0.0)], bases=(SamplingParams,), frozen=True
    )
    plain = GenerationOptions(Extended(), SamplingParams())
    other = GenerationOptions(Extended(min_p=0.1), SamplingParams())
    assert _digest(plain) != _digest(other)


def test_the_digest_of_todays_fields_is_what_earlier_runs_recorded():
    """The sites written out by hand, as qtts recorded them before they were read from the
    dataclass: an out dir made then must not be redone by this change."""
    options = generation_options(DEFAULTS, SamplingOverrides())
    by_hand = {
        "model": "m", "precision": "float32", "max_new_tokens": None, "format": "wav",
        **{site: {"do_sample": p.do_sample, "temperature": p.temperature, "top_k": p.top_k,
                  "top_p": p.top_p, "repetition_penalty": p.repetition_penalty}
           for site, p in (("talker", options.talker), ("subtalker", options.subtalker))},
    }  # fmt: skip
    from qtts.core.jobs.work.fingerprint import digest_of

    assert _digest(options) == digest_of(by_hand)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ({"temperature": 0.0}, "--temperature must be > 0"),
        ({"subtalker_top_p": 1.5}, "--subtalker-top-p must be in (0, 1]"),
        ({"repetition_penalty": -1.0}, "--repetition-penalty must be > 0"),
    ],
)
def test_a_value_out_of_range_names_its_flag(flags, said):
    from qtts.core.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(said)):
        generation_options(DEFAULTS, SamplingOverrides.from_flags(**flags))
