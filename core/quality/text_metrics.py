"""How far an ASR transcript is from the text a row asked for: the normalization and the error
rates (CER, WER) that `qtts score --asr-model` reports.

The normalization is named (NORMALIZATION, part of the ASR scorer's identity) and is Whisper's
own: English text through Whisper's English normalizer (numbers, spellings, contractions,
punctuation; the British-to-American spelling map is the checkpoint's `normalizer.json` when it
has one), every other language through Whisper's basic normalizer (case and punctuation).
Chinese and Japanese are written without spaces, so they get no WER and their CER counts
characters with the spaces removed. Error rates are jiwer's. Knows text; no audio, no models.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# Changing any rule here changes the ASR scorer's identity, so every row is scored again.
NORMALIZATION = "whisper-en+basic/jiwer/cjk-chars:v1"
# Languages scored by characters alone (no spaces between words).
CHARACTER_LANGUAGES = ("chinese", "japanese")
# Han, kana (with the long-vowel mark) and CJK punctuation: a text mostly of these is scored by
# characters when its row names no language.
_CJK = re.compile(r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
_LETTER = re.compile(r"[^\W\d_]")
_SPACE = re.compile(r"\s+")
UNKNOWN_LANGUAGES = (None, "", "auto")


@dataclass(frozen=True)
class Rates:
    cer: float | None  # None: the reference has nothing left after normalization
    wer: float | None  # None also for Chinese and Japanese


def scoring_language(language: str | None, text: str) -> str:
    """'character', 'english' or 'other': how a row's transcript is normalized and scored. A
    row that names no language (or auto) is judged by its text's script."""
    name = (language or "").strip().lower()
    if name in CHARACTER_LANGUAGES:
        return "character"
    if name == "english":
        return "english"
    if name not in UNKNOWN_LANGUAGES:
        return "other"
    letters = _LETTER.findall(text)
    if letters and 2 * sum(bool(_CJK.match(c)) for c in letters) >= len(letters):
        return "character"
    return "english" if letters and all(c.isascii() for c in letters) else "other"


class Normalizer:
    """Whisper's normalizers; english_spelling: the checkpoint's British-to-American map."""

    def __init__(self, english_spelling: dict[str, str] | None = None) -> None:
        from transformers.models.whisper.english_normalizer import (
            BasicTextNormalizer,
            EnglishTextNormalizer,
        )

        self._english: Callable[[str], str] = EnglishTextNormalizer(english_spelling or {})
        self._basic: Callable[[str], str] = BasicTextNormalizer()

    def __call__(self, text: str, kind: str) -> str:
        normal = self._english(text) if kind == "english" else self._basic(text)
        if kind == "character":
            return _SPACE.sub("", normal)
        return _SPACE.sub(" ", normal).strip()


def error_rates(reference: str, hypothesis: str, kind: str, normalize: Normalizer) -> Rates:
    """CER and WER of `hypothesis` against `reference`, both normalized for `kind`."""
    import jiwer

    ref, hyp = normalize(reference, kind), normalize(hypothesis, kind)
    if not ref:  # an error rate over nothing is undefined (and jiwer's answer is arbitrary)
        return Rates(0.0 if not hyp else None, None if kind == "character" or hyp else 0.0)
    cer = jiwer.cer(ref, hyp) if hyp else 1.0
    if kind == "character":
        return Rates(float(cer), None)
    return Rates(float(cer), float(jiwer.wer(ref, hyp)) if hyp else 1.0)
