"""Qwen3-TTS's language names and their ISO 639-1 tags, both ways: a row or `--language` may
give `en` (or `en-US`) for `english`, and a dataset card tags its languages `en`. Knows names;
no model.
"""

from __future__ import annotations

# The checkpoints' language names (and dialects) as ISO 639-1 tags.
LANGUAGE_TAGS = {
    "chinese": "zh",
    "english": "en",
    "japanese": "ja",
    "korean": "ko",
    "german": "de",
    "french": "fr",
    "russian": "ru",
    "portuguese": "pt",
    "spanish": "es",
    "italian": "it",
    "beijing_dialect": "zh",
    "sichuan_dialect": "zh",
}
# A tag names the language itself, never a dialect.
NAMES_BY_TAG = {tag: name for name, tag in LANGUAGE_TAGS.items() if "dialect" not in name}


def language_name(given: str, supported: list[str]) -> str:
    """`given` lower-cased, as the model names it: a supported name as it is, else an ISO 639-1
    tag (its region dropped: `en-US`, `pt_BR`) of a supported language as that language's name;
    anything else unchanged (the caller refuses it)."""
    value = given.strip().lower()
    if value in supported:
        return value
    tag = value.replace("_", "-").split("-")[0]
    name = NAMES_BY_TAG.get(tag) if len(tag) == 2 else None
    return name if name in supported else value
