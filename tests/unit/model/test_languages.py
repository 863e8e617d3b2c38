"""Language names from ISO 639-1 tags, against the languages a checkpoint supports."""

import pytest

from qtts.core.model.languages import LANGUAGE_TAGS, language_name

SUPPORTED = ["auto", "chinese", "english", "german"]


def test_a_tag_is_the_supported_language_it_names():
    assert language_name("en", SUPPORTED) == "english"
    assert language_name(" ZH-hans ", SUPPORTED) == "chinese"  # a tag names the language, not
    assert language_name("de_AT", SUPPORTED) == "german"  # a dialect; the region is dropped


def test_names_stay_and_anything_else_is_left_for_the_refusal():
    assert language_name("English", SUPPORTED) == "english"
    assert language_name("auto", SUPPORTED) == "auto"
    assert language_name("fr", SUPPORTED) == "fr"  # French is a tag, not this model's language
    assert language_name("klingon", SUPPORTED) == "klingon"
    assert language_name("eng", SUPPORTED) == "eng"  # ISO 639-2 is not read


def test_every_tag_of_a_language_is_two_letters():
    assert all(len(tag) == 2 and tag.islower() for tag in LANGUAGE_TAGS.values())


def test_the_synthesizers_row_check_takes_a_tag():
    """The real normalize_row (the CLI tests run a fake model's): `en-GB` is English there."""
    from fakes import make_config

    from qtts.core.synthesis.prompt import normalize_row

    config = make_config()
    assert normalize_row(config, "Vivian", "en-GB", None)[:2] == ("vivian", "english")
    with pytest.raises(ValueError, match="unknown language 'fr'"):  # not this model's
        normalize_row(config, "vivian", "fr", None)
