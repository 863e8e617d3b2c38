"""A tiny byte-level Qwen2 BPE text tokenizer for test checkpoints.

Owns: writing vocab.json, merges.txt and tokenizer_config.json (no tokenizer.json, like the
published checkpoints) for a ~300-id byte-level BPE whose merges make "assistant" and "user"
single tokens, plus the special tokens the Qwen3-TTS prompt templates use.

Must not know: torch, transformers or any qtts module. It is pure Python + json so the oracle
script (a separate venv) can load this file by path, and the project imports it as
qtts.core.tiny.tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

# Special tokens, in id order after the BPE vocab. Names follow the real Qwen3-TTS tokenizer
# (the TTS text markers there are "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", without "|").
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
)

# Role words first so their merge chains outrank everything else and always complete.
_WHOLE_WORDS = ("assistant", "user")

# A handful of common English merges (byte-level symbols; "Ġ" is the space byte).
_COMMON_MERGES = (
    ("Ġ", "t"),
    ("h", "e"),
    ("Ġt", "he"),
    ("i", "n"),
    ("e", "r"),
    ("Ġ", "a"),
    ("o", "n"),
    ("r", "e"),
    ("Ġ", "s"),
    ("e", "n"),
    ("a", "t"),
    ("o", "u"),
    ("Ġ", "w"),
    ("i", "s"),
    ("Ġ", "i"),
    ("Ġ", "o"),
    ("l", "l"),
    ("e", "d"),
    ("i", "ng"),
    ("n", "g"),
    ("Ġ", "h"),
    ("Ġ", "c"),
    ("o", "r"),
    ("Ġ", "b"),
    ("a", "n"),
    ("Ġ", "he"),
    ("Ġ", "f"),
    ("l", "o"),
    ("Ġ", "W"),
    ("Ġ", "T"),
    ("Ġt", "o"),
    ("Ġ", "is"),
    ("Ġ", "in"),
    ("Ġo", "f"),
    ("Ġa", "nd"),
    ("n", "d"),
    ("e", "s"),
    ("Ġ", "m"),
    ("Ġ", "p"),
    ("Ġ", "d"),
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2 byte -> printable unicode symbol map used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _word_chain(word: str) -> list[tuple[str, str]]:
    """Left-to-right merges that build `word` from its characters."""
    return [(word[:i], word[i]) for i in range(1, len(word))]


def _merge_list() -> list[tuple[str, str]]:
    merges: list[tuple[str, str]] = []
    for word in _WHOLE_WORDS:
        merges.extend(_word_chain(word))
    for pair in _COMMON_MERGES:
        if pair not in merges:
            merges.append(pair)
    return merges


def _check_merges(merges: list[tuple[str, str]], base: set[str]) -> None:
    """Each merge's parts must exist before it (BPE can only merge known symbols)."""
    known = set(base)
    for left, right in merges:
        if left not in known or right not in known:
            # "i"+"ng" needs "ng" first: reorder rather than ship an unreachable merge.
            raise ValueError(f"merge {left!r} + {right!r} uses a symbol not built yet")
        known.add(left + right)


def _ordered_merges(base: set[str]) -> list[tuple[str, str]]:
    """Merge list with any pair whose parts are not built yet moved after its dependencies."""
    pending = _merge_list()
    known = set(base)
    ordered: list[tuple[str, str]] = []
    while pending:
        progressed = False
        for pair in list(pending):
            if pair[0] in known and pair[1] in known:
                ordered.append(pair)
                known.add(pair[0] + pair[1])
                pending.remove(pair)
                progressed = True
                break
        if not progressed:
            raise ValueError(f"unreachable merges: {pending}")
    _check_merges(ordered, base)
    return ordered


def build_vocab() -> tuple[dict[str, int], list[tuple[str, str]], dict[str, int]]:
    """Return (vocab without specials, merges, special token ids)."""
    byte_syms = bytes_to_unicode()
    vocab = {byte_syms[b]: b for b in range(256)}
    merges = _ordered_merges(set(vocab))
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    specials = {tok: len(vocab) + i for i, tok in enumerate(SPECIAL_TOKENS)}
    return vocab, merges, specials


def _tokenizer_config(specials: dict[str, int]) -> dict:
    added = {
        str(idx): {
            "content": tok,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for tok, idx in specials.items()
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_tiny_tokenizer(out_dir: str | Path) -> dict[str, int]:
    """Write vocab.json, merges.txt, tokenizer_config.json into `out_dir`.

    Returns the special token ids by name (e.g. "<|im_start|>", "<tts_pad>") plus
    "vocab_size" (total ids including specials, for the text embedding table).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab, merges, specials = build_vocab()
    with open(out / "vocab.json", "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=1)
    with open(out / "merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for left, right in merges:
            f.write(f"{left} {right}\n")
    with open(out / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(_tokenizer_config(specials), f, ensure_ascii=False, indent=2)
    ids = dict(specials)
    ids["vocab_size"] = len(vocab) + len(specials)
    return ids
