"""The resume check's regex flags every text the splitter would cut at a sentence end: a text it
misses would keep a stale whole-row record after a switch to --split sentence."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.long_text.split_text import split_texts
from qtts.core.jobs.work.split_rules import _SENTENCE_INSIDE

# Letters of several scripts and cases, digits, spaces of several kinds, terminators, closers,
# clause marks, and the abbreviation cases ("Dr", single capitals).
ALPHABET = [*"aZé中ア한ก1 \t\u00a0\u3000\u2009.!?…。！？；।؟\"')」,，:", "Dr", "e.g", "U", "\n"]


def _flags(texts: list[str]) -> list[bool]:
    return pc.match_substring_regex(pa.array(texts), _SENTENCE_INSIDE).to_pylist()


def test_every_text_the_splitter_cuts_is_flagged():
    rng = random.Random(20)
    texts = ["".join(rng.choices(ALPHABET, k=rng.randint(1, 14))) for _ in range(20_000)]
    texts += ["Hello. (but this)", "Hello. 'quoted' yes", "Stop.\u00a0Next", "一。二", "A!\u3000b"]
    cuts = split_texts(texts, 10**6, lambda xs: [1] * len(xs), every_sentence=True)
    missed = [t for t, c, f in zip(texts, cuts, _flags(texts), strict=True) if len(c) > 1 and not f]
    assert not missed, missed[:10]
    assert sum(len(c) > 1 for c in cuts) > 1000  # the strings do exercise the cut


def test_a_single_sentence_is_not_flagged():
    single = ["One sentence only", "Ends here.", "3.14 and 2.5", "中文没有句号"]
    assert _flags(single) == [False] * len(single)
