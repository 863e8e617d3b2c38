"""A tiny random Whisper checkpoint, built offline, for `qtts score --asr-model` in tests and to
try the ASR round trip without a download.

Owns: the checkpoint directory (config, random weights, generation config with English, Chinese
and Japanese, the feature extractor and a byte-level BPE tokenizer with Whisper's special
tokens, made from qtts.core.tiny.tokenizer's vocabulary). What transformers needs to build a
WhisperProcessor offline: vocab.json and merges.txt for WhisperTokenizer (the special tokens
added to it) and a WhisperFeatureExtractor, which has no files of its own. Its weights are
random, so it transcribes noise into gibberish: it proves the plumbing, never accuracy.
Must not know: jobs, scoring.
"""

from __future__ import annotations

import json
from pathlib import Path

from qtts.core.tiny.tokenizer import build_vocab

LANGUAGES = ("en", "zh", "ja")
SPECIALS = (
    "<|endoftext|>",
    "<|startoftranscript|>",
    *(f"<|{c}|>" for c in LANGUAGES),
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nocaptions|>",
    "<|notimestamps|>",
)
MAX_TOKENS = 24  # what it generates per window (random weights never stop on their own)
MEL_BINS = 80


def make_tiny_whisper(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the checkpoint into out_dir (created) and return it."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab, merges, _ = build_vocab()
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (out / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8"
    )
    end = SPECIALS[0]
    files = (str(out / "vocab.json"), str(out / "merges.txt"))
    tokenizer = WhisperTokenizer(*files, unk_token=end, bos_token=end, eos_token=end, pad_token=end)
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    ids = {s: tokenizer.convert_tokens_to_ids(s) for s in SPECIALS}
    WhisperProcessor(WhisperFeatureExtractor(feature_size=MEL_BINS), tokenizer).save_pretrained(out)
    special = {
        "pad_token_id": ids[end],
        "bos_token_id": ids[end],
        "eos_token_id": ids[end],
        "decoder_start_token_id": ids["<|startoftranscript|>"],
    }
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=MEL_BINS,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_target_positions=64,
        **special,
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        **special,
        max_length=MAX_TOKENS,
        is_multilingual=True,
        lang_to_id={f"<|{c}|>": ids[f"<|{c}|>"] for c in LANGUAGES},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"],
    )
    model.save_pretrained(out)
    return out
