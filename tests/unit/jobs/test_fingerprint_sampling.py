"""Every sampling option reaches the fingerprint: a rerun with any of them changed redoes its
rows. The sampling sites are read from SamplingParams' fields, so a field added there is in the
fingerprint with no second list to keep in step."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from qtts.cli.job_options import sampling_options
from qtts.core.jobs.execution.generation import generation_options
from qtts.core.jobs.spec import SamplingOverrides
from qtts.core.jobs.work.fingerprint import job_settings
from qtts.core.model.config import GenerationDefaults, SamplingParams
from qtts.core.synthesis.requests import GenerationOptions

DEFAULTS = GenerationDefaults()  # the official hard defaults: both sites sample


def _digest(options: GenerationOptions) -> str:
    return job_settings(model="m", precision="float32", options=options, max_new_tokens=None,
                        audio_format="wav").digest  # fmt: skip


def _changed(field: dataclasses.Field):
    """A value for this override that differs from every default it could replace."""
    if field.name == "greedy":
        return True
    return 7 if "top_k" in field.name else 0.55  # temperatures, top_p, repetition penalty


def test_the_command_line_options_are_the_overrides_fields():
    names = list(inspect.signature(sampling_options).parameters)
    assert names == [f.name for f in dataclasses.fields(SamplingOverrides)]


@pytest.mark.parametrize("field", dataclasses.fields(SamplingOverrides), ids=lambda f: f.name)
def test_each_sampling_option_changes_the_fingerprint(field):
    base = _digest(generation_options(DEFAULTS, SamplingOverrides()))
    overrides = SamplingOverrides(**{field.name: _changed(field)})
    assert _digest(generation_options(DEFAULTS, overrides)) != base


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
