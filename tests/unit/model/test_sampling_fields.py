"""A sampling parameter is one SamplingParams field (core/model/config.py): its command-line flags,
its generation_config.json keys, the merge and its range check are all made from the field. A field
added here (min_p, say) appears in each of them with no other line written; the flags today are
the ones the field list gives; the config parse and its inverse agree."""

from __future__ import annotations

import dataclasses

import pytest

import qtts.core.model.config as config
from qtts.cli import options as o
from qtts.core.model.config import GenerationDefaults, SamplingParams, sampling_field


def _flag_names() -> list[str]:
    return [p.name for p in o.sampling_flags()]


def test_the_flags_are_the_fields_at_each_site():
    assert _flag_names() == [
        "temperature",
        "top_k",
        "top_p",
        "repetition_penalty",
        "subtalker_temperature",
        "subtalker_top_k",
        "subtalker_top_p",
    ]  # fmt: skip  (the penalty is the talker's only, as in the official code)


def test_a_config_round_trips_through_its_keys():
    d = GenerationDefaults(
        talker=SamplingParams(
            do_sample=False, temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.2
        ),
        subtalker=SamplingParams(do_sample=True, temperature=0.5, top_k=5, top_p=0.9),
        max_new_tokens=300,
    )
    assert GenerationDefaults.from_dict(d.to_dict()) == d
    assert GenerationDefaults.from_dict({}) == GenerationDefaults()  # the official hard defaults


def test_a_new_field_appears_in_flags_keys_and_checks(monkeypatch):
    with_min_p = dataclasses.make_dataclass(
        "SamplingParams",
        [
            (
                "min_p",
                float,
                sampling_field(
                    0.0,
                    keys=("min_p", "subtalker_min_p"),
                    help="min-p",
                    valid=(lambda v: 0 <= v < 1, "must be in [0, 1)"),
                    drawing=True,
                ),
            )
        ],  # fmt: skip
        bases=(SamplingParams,),
        frozen=True,
    )
    monkeypatch.setattr(config, "SamplingParams", with_min_p)
    assert {"min_p", "subtalker_min_p"} <= set(_flag_names())
    talker = with_min_p.from_config({"min_p": 0.05}, 0)
    assert talker.min_p == 0.05 and with_min_p.from_config({}, 1).min_p == 0.0
    assert with_min_p(min_p=1.5).out_of_range() == [("min_p", "must be in [0, 1)")]


@pytest.mark.parametrize("site", [0, 1])
def test_every_field_has_a_key_or_says_its_site_lacks_it(site):
    for f in dataclasses.fields(SamplingParams):
        assert set(f.metadata) >= {"keys", "help", "valid", "drawing", "defaults"}, f.name
        assert f.metadata["keys"][site] is None or isinstance(f.metadata["keys"][site], str)
