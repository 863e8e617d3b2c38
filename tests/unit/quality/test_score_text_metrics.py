"""The ASR round trip's error rates: Whisper's normalizers, then jiwer; Chinese and Japanese by
characters (no WER)."""

from __future__ import annotations

import pytest

from qtts.core.quality.text_metrics import Normalizer, error_rates, scoring_language


@pytest.fixture(scope="module")
def normalize():
    return Normalizer({"colour": "color"})


def test_english_is_normalized_before_it_is_compared(normalize):
    heard = "hello mister smith the color is two dollars"
    rates = error_rates("Hello, Mr. Smith! The colour is 2 dollars.", heard, "english", normalize)
    assert rates.cer == 0.0 and rates.wer == 0.0


def test_error_rates_count_edits(normalize):
    rates = error_rates("the cat sat on the mat", "the cat sat on a mat", "english", normalize)
    assert rates.wer == pytest.approx(1 / 6)
    assert rates.cer == pytest.approx(3 / 22)  # "the" -> "a": 2 deletions and a substitution


def test_chinese_and_japanese_count_characters_and_have_no_wer(normalize):
    zh = error_rates("你好，世界。", "你好 世界", "character", normalize)
    assert zh.cer == 0.0 and zh.wer is None
    ja = error_rates("こんにちは", "こんばんは", "character", normalize)
    assert ja.cer == pytest.approx(2 / 5) and ja.wer is None


def test_an_empty_transcript_is_all_deletions_and_an_empty_reference_is_undefined(normalize):
    assert error_rates("hello world", "", "english", normalize).cer == 1.0
    assert error_rates("hello world", "", "english", normalize).wer == 1.0
    assert error_rates("?!", "words", "english", normalize).cer is None
    assert error_rates("?!", "", "english", normalize).cer == 0.0


@pytest.mark.parametrize(
    ("language", "text", "kind"),
    [
        ("english", "你好", "english"),  # the row's language wins
        ("Chinese", "hello", "character"),
        ("japanese", "x", "character"),
        ("german", "Guten Tag", "other"),
        ("auto", "你好，世界", "character"),  # no language: the script decides
        (None, "Hello there", "english"),
        (None, "Grüß Gott", "other"),
    ],
)
def test_the_scoring_language(language, text, kind):
    assert scoring_language(language, text) == kind
