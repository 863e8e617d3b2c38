"""Long text cut into segments the model speaks reliably (README, "Long text"): at sentence ends,
then clauses, then words, then (scripts without spaces: Chinese, Japanese) characters; the pieces
packed in order into segments of at most `max_tokens` text tokens, each a stripped slice of the
text. Token counts come through `count`, one batched call per level. Knows text and a counter."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby

Count = Callable[[list[str]], Sequence[int]]

_CLOSERS = "\"'”’»)\\]」』）】〕》〉"
# Terminators that end a sentence wherever they stand (CJK full stops and the like, the danda,
# the Arabic question mark, the Urdu full stop, the Armenian, Ethiopic and Myanmar full stops,
# the Greek question mark, a line break), and those that do only before a space or the end.
_ALWAYS = "。！？；｡।॥؟۔։።။\u037e\n"
_BEFORE_SPACE = ".!?…‼⁇⁈⁉"
_SENTENCE_END = re.compile(
    rf"(?:[{_ALWAYS}]+|[{_BEFORE_SPACE}]+(?=[{_CLOSERS}]*(?:\s|$)))[{_CLOSERS}]*"
)
# Clause marks: full-width ones (and the dashes) wherever they stand; ASCII ones only before a
# space, so "3,000", "12:30" and URLs are never cut.
_CLAUSE_END = re.compile(rf"(?:[，、：﹐﹑،؛—]+|[,;:]+(?=[{_CLOSERS}]*\s))[{_CLOSERS}]*")
_TITLES = {"mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "vs", "fig", "e.g", "i.e"}
_WORD = re.compile(r"\S+")
_ALNUM = re.compile(r"[^\W_]")  # exactly str.isalnum(): \w is alphanumerics and "_"
# Small kana, the prolonged-sound and iteration marks: they belong to the character before.
_SMALL_KANA = set(
    "ぁぃぅぇぉっゃゅょゎゕゖァィゥェォッャュョヮヵヶㇰㇱㇲㇳㇴㇵㇶㇷㇸㇹㇺㇻㇼㇽㇾㇿー々ゝゞヽヾ"
)
# Characters that are words on their own: Han and kana. Not Hangul: Korean puts spaces between
# words, and a Hangul syllable is a part of one.
_OWN_UNIT = re.compile(
    "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"
    "\U00020000-\U0003134f]"
)


def _spans(start: int, end: int, cuts: list[int]) -> list[tuple[int, int]]:
    bounds = [start, *(c for c in cuts if start < c < end), end]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    cuts = []
    for m in _SENTENCE_END.finditer(text, start, end):
        if m.group().startswith(".") and _abbreviated(text, m.start(), m.end(), end):
            continue
        cuts.append(m.end())
    return _spans(start, end, cuts)


def _abbreviated(text: str, stop: int, after: int, end: int) -> bool:
    """A full stop that does not end a sentence: before a lower-case word ("e.g. this"), after
    an initial ("J. Smith") or a title ("Dr. Smith")."""
    if text[after:end].lstrip()[:1].islower():
        return True
    before = text[max(0, stop - 8) : stop]  # titles are short
    word = before.rsplit(None, 1)[-1] if before.strip() else ""
    return (len(word) == 1 and word.isupper()) or word.lower() in _TITLES


def _clauses(text: str, start: int, end: int) -> list[tuple[int, int]]:
    return _spans(start, end, [m.end() for m in _CLAUSE_END.finditer(text, start, end)])


def _words(text: str, start: int, end: int) -> list[tuple[int, int]]:
    return _spans(start, end, [m.start() for m in _WORD.finditer(text, start, end)])


def _characters(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Cut before each character that is a word on its own (see the module docstring)."""
    cuts, previous_own = [], False
    for i in range(start, end):
        ch = text[i]
        own = bool(_OWN_UNIT.match(ch)) and ch not in _SMALL_KANA
        if (own or previous_own) and not (ch in _SMALL_KANA or unicodedata.combining(ch)):
            cuts.append(i)
        if not (ch in _SMALL_KANA or unicodedata.combining(ch)):
            previous_own = own
    return _spans(start, end, cuts)


LEVELS = (_sentences, _clauses, _words, _characters)


@dataclass
class _Piece:
    start: int
    end: int
    sentence: int  # which sentence of the text it belongs to
    level: int  # the LEVELS entry that made it
    tokens: int = 0


def split_texts(
    texts: Sequence[str], max_tokens: int, count: Count, *, every_sentence: bool = False
) -> list[list[str]]:
    """Each text's segments, in order; [text] when it makes a single segment."""
    pieces = [_first_pieces(t) for t in texts]
    todo = [(i, p) for i, ps in enumerate(pieces) for p in ps]
    while todo:
        counts = count([texts[i][p.start : p.end].strip() for i, p in todo])
        for (_, p), n in zip(todo, counts, strict=True):
            p.tokens = int(n)
        todo = []
        for i, text in enumerate(texts):
            out = []
            for p in pieces[i]:
                finer = _finer(text, p) if p.tokens > max_tokens else None
                out.extend(finer or [p])
                todo.extend((i, c) for c in finer or ())
            pieces[i] = out
    segments = []
    for text, ps in zip(texts, pieces, strict=True):
        cut = [text[a:b].strip() for a, b in _pack(ps, max_tokens, every_sentence)]
        segments.append(cut if len(cut) > 1 else [text])
    return segments


def _first_pieces(text: str) -> list[_Piece]:
    spans = _merge_wordless(text, _sentences(text, 0, len(text)))
    return [_Piece(a, b, n, 0) for n, (a, b) in enumerate(spans)]


def _finer(text: str, p: _Piece) -> list[_Piece] | None:
    """p cut at the next level that cuts it at all; None when no level can."""
    for level in range(p.level + 1, len(LEVELS)):
        spans = _merge_wordless(text, LEVELS[level](text, p.start, p.end))
        if len(spans) > 1:
            return [_Piece(a, b, p.sentence, level) for a, b in spans]
    return None


def _merge_wordless(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A span with no letter or digit (stray punctuation, spaces) joins the span before it (the
    first one, the span after): the model is never asked to speak "." alone."""
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and (_ALNUM.search(text, a, b) is None or _ALNUM.search(text, *out[-1]) is None):
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _pack(pieces: list[_Piece], max_tokens: int, every_sentence: bool) -> list[tuple[int, int]]:
    """Whole sentences joined while they fit (not every_sentence's); a cut one's pieces balanced."""
    spans: list[tuple[int, int]] = []
    tokens, joinable = 0, False
    for run in _runs(pieces):
        if len(run) > 1 or run[0].level > 0:
            spans += _balanced(run, max_tokens)
            joinable = False
        elif joinable and not every_sentence and tokens + run[0].tokens <= max_tokens:
            spans[-1] = (spans[-1][0], run[0].end)
            tokens += run[0].tokens
        else:
            spans.append((run[0].start, run[0].end))
            tokens, joinable = run[0].tokens, True
    return spans


def _runs(pieces: list[_Piece]) -> list[list[_Piece]]:
    """Pieces grouped by sentence."""
    return [list(run) for _, run in groupby(pieces, key=lambda p: p.sentence)]


def _balanced(run: list[_Piece], max_tokens: int) -> list[tuple[int, int]]:
    """A cut sentence's pieces in the fewest segments that fit, of about equal tokens: a
    segment closes when the next piece would not fit, or would overshoot its share by over half."""
    left = sum(p.tokens for p in run)
    parts = max(1, -(-left // max_tokens))
    spans: list[tuple[int, int]] = []
    tokens = 0
    for p in run:
        share = left / parts
        if spans and tokens and (tokens + p.tokens > max_tokens or tokens + p.tokens / 2 > share):
            left, parts, tokens = left - tokens, max(parts - 1, 1), 0
        if tokens:
            spans[-1] = (spans[-1][0], p.end)
        else:
            spans.append((p.start, p.end))
        tokens += p.tokens
    return spans
