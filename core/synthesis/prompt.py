"""Text -> prompt: tokenization, row normalisation, and the talker's prefill embeddings.

Owns the prompt layout of docs/model.md, "Prompt layout" (CustomVoice and VoiceDesign use the
non-streaming layout, as the official wrapper does). Embeddings are computed with the same slices
and projection calls as the official code so that they are bitwise equal. Knows token ids and the
model's embedding tables; knows nothing of files, batching or sampling.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from qtts.core.engine.step.host_copy import ids_to_device
from qtts.core.engine.step.slots import Prompt
from qtts.core.errors import VoiceError
from qtts.core.model.config import ModelConfig
from qtts.core.model.languages import language_name

# Template slices (Qwen2 tokenizer, no BOS/EOS added).
ROLE = slice(0, 3)  # "<|im_start|>assistant\n"
TEXT = slice(3, -5)  # the text itself; "<|im_end|>\n<|im_start|>assistant\n" follows


def assistant_template(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def reference_template(ref_text: str) -> str:
    """ICL reference text; its ids[3:-2] are the text itself."""
    return f"<|im_start|>assistant\n{ref_text}<|im_end|>\n"


def instruct_template(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


def load_tokenizer(model_dir: str | Path):
    """The checkpoint's Qwen2 BPE tokenizer, loaded as the official wrapper loads it."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    # AutoTokenizer reads config.json, does not know model_type qwen3_tts, and warns; harmless.
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(str(model_dir), fix_mistral_regex=True)
    finally:
        hf_logging.set_verbosity(previous)


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text)["input_ids"])


def normalize_row(
    config: ModelConfig, speaker: str | None, language: str | None, instruct: str | None
) -> tuple[str | None, str, str | None, str | None]:
    """Validate one row's voice fields -> (speaker, language, instruct, warning or None).

    Case-insensitive like the official wrapper; a language may be its ISO 639-1 tag (`en`).
    Raises VoiceError (a ValueError) naming the field and what the model supports.
    """
    language = language_name(language or "auto", config.supported_languages())
    if language not in config.supported_languages():
        raise VoiceError(
            f"unknown language {language!r}; this model supports: "
            + ", ".join(config.supported_languages()),
            "language",
        )
    speaker = (speaker or "").strip().lower() or None
    if config.uses_speaker:
        if speaker is None:
            raise VoiceError(
                "speaker is required for CustomVoice models; choose one of: "
                + ", ".join(config.supported_speakers()),
                "speaker",
            )
        if speaker not in config.talker.spk_id:
            raise VoiceError(
                f"unknown speaker {speaker!r}; this model has: "
                + ", ".join(config.supported_speakers()),
                "speaker",
            )
    elif speaker is not None and config.tts_model_type in ("voice_design", "base"):
        speaker = None  # the voice comes from instruct (VoiceDesign) or the reference (Base)
    instruct = instruct if instruct and instruct.strip() else None
    warning = None
    if instruct is not None and config.tts_model_type == "base":
        instruct, warning = None, "instruct ignored: Base (voice clone) models do not take one"
    if instruct is not None and not config.honours_instruct:
        instruct, warning = None, "instruct ignored: 0.6B CustomVoice models do not support it"
    return speaker, language, instruct, warning


@dataclass(frozen=True)
class PromptTokens:
    """Everything the prompt needs, as ids. No tensors."""

    text_ids: list[int]  # the full assistant template
    instruct_ids: list[int] | None
    codec_prefix: list[
        int
    ]  # [think, think_bos, lang, think_eos] or [nothink, think_bos, think_eos]
    speaker_id: int | None  # codec id of a CustomVoice speaker
    # Base voice clone (streaming layout, x-vector in the speaker slot); ICL adds the reference.
    clone: bool = False
    ref_ids: list[int] | None = None  # ICL: the reference template ids
    ref_frames: int = 0  # ICL: frames of the reference codes
    ref_audio: str | None = None  # the reference this prompt clones (looked up by the caller)
    ref_text: str | None = None
    voice: str | None = None  # or the voice file it clones


def prompt_tokens(
    config: ModelConfig,
    tokenizer,
    text: str,
    speaker: str | None,
    language: str,
    instruct: str | None,
) -> PromptTokens:
    """Ids for one normalised row (see normalize_row)."""
    t = config.talker
    lang_id = None if language == "auto" else t.codec_language_id[language]
    # Dialect speakers override "chinese" and "auto" with their dialect (official behaviour).
    dialect = t.spk_is_dialect.get(speaker) if speaker else None
    if language in ("chinese", "auto") and dialect:
        lang_id = t.codec_language_id[str(dialect).lower()]
    if lang_id is None:
        prefix = [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
    else:
        prefix = [t.codec_think_id, t.codec_think_bos_id, lang_id, t.codec_think_eos_id]
    return PromptTokens(
        text_ids=encode(tokenizer, assistant_template(text)),
        instruct_ids=encode(tokenizer, instruct_template(instruct)) if instruct else None,
        codec_prefix=prefix,
        speaker_id=t.spk_id[speaker] if speaker and config.uses_speaker else None,
    )


def _special_ids(config: ModelConfig) -> list[int]:
    """[tts_bos, tts_eos, tts_pad]: embedded together, as the official code does (bitwise)."""
    return [config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]


@torch.no_grad()
def embed_prompt(talker, config: ModelConfig, tokens: PromptTokens) -> Prompt:
    """Non-streaming prefill layout (docs/model.md, "Prompt layout"), built with the official
    slices. Every id reaches the device in one non-blocking copy
    (qtts.core.engine.step.host_copy)."""
    t = config.talker
    n = len(tokens.text_ids) - 8 + 1  # text tokens + tts_eos
    ids = ids_to_device(
        {
            "text": tokens.text_ids,
            "special": _special_ids(config),
            "prefix": tokens.codec_prefix,
            "speaker": [] if tokens.speaker_id is None else [tokens.speaker_id],
            "pad_bos": [t.codec_pad_id, t.codec_bos_id],
            "pads": [t.codec_pad_id] * n,
            "bos": [t.codec_bos_id],
            "instruct": tokens.instruct_ids or [],
        },
        talker.model.codec_embedding.weight.device,
    )  # name -> [1, n]
    tts_bos, tts_eos, tts_pad = talker.embed_text(ids["special"]).chunk(3, dim=1)  # 3 x [1, 1, H]

    codec = [talker.embed_codec(ids["prefix"])]
    if tokens.speaker_id is not None:
        codec.append(talker.embed_codec(ids["speaker"]))  # [1, 1, H]
    codec.append(talker.embed_codec(ids["pad_bos"]))
    codec = torch.cat(codec, dim=1)  # [1, Lc, H]

    role = talker.embed_text(ids["text"][:, ROLE])  # [1, 3, H]
    # tts_pad under the codec prefix/speaker, tts_bos on the C(pad) position.
    pads = tts_pad.expand(-1, codec.shape[1] - 2, -1)
    head = torch.cat((pads, tts_bos), dim=1) + codec[:, :-1]  # [1, Lc-1, H]
    text = talker.embed_text(ids["text"][:, TEXT])  # [1, N, H]
    body = torch.cat((text, tts_eos), dim=1) + talker.embed_codec(ids["pads"])  # [1, N+1, H]
    tail = tts_pad + talker.embed_codec(ids["bos"])  # [1, 1, H]
    parts = [role, head, body, tail]
    if tokens.instruct_ids is not None:
        parts.insert(0, talker.embed_text(ids["instruct"]))
    embeds = torch.cat(parts, dim=1)[0]  # [L, H]
    return Prompt(embeds=embeds, trailing=tts_pad[0])  # trailing [1, H]


@torch.no_grad()
def embed_clone_prompt(
    talker,
    config: ModelConfig,
    tokens: PromptTokens,
    x_vector: torch.Tensor,
    ref_code: torch.Tensor | None,
) -> Prompt:
    """Voice-clone prefill in the streaming layout the official clone path uses (§3): the x-vector
    [H] in the speaker slot; x-vector only: P(T0) + C(bos), trailing [P(T1..), tts_eos]; ICL
    (ref_code [F, G]): the text stream [P(ref + text), tts_eos] over [C(bos), frame sums]."""
    dev = talker.model.codec_embedding.weight.device
    t = config.talker
    ids = ids_to_device(
        {
            "text": tokens.text_ids,
            "special": _special_ids(config),
            "prefix": tokens.codec_prefix,
            "pad_bos": [t.codec_pad_id, t.codec_bos_id],
            "bos": [t.codec_bos_id],
            "ref": tokens.ref_ids or [],
        },
        dev,
    )  # name -> [1, n]
    text_ids = ids["text"]
    tts_bos, tts_eos, tts_pad = talker.embed_text(ids["special"]).chunk(3, dim=1)  # 3 x [1, 1, H]
    codec = torch.cat(
        (
            talker.embed_codec(ids["prefix"]),
            x_vector.to(tts_pad.dtype).view(1, 1, -1),
            talker.embed_codec(ids["pad_bos"]),
        ),
        dim=1,
    )  # [1, Lc, H]
    pads = tts_pad.expand(-1, codec.shape[1] - 2, -1)
    head = torch.cat((pads, tts_bos), dim=1) + codec[:, :-1]  # [1, Lc-1, H]
    parts = [talker.embed_text(text_ids[:, ROLE]), head]
    if ref_code is None:
        parts.append(talker.embed_text(text_ids[:, 3:4]) + codec[:, -1:])
        trailing = torch.cat((talker.embed_text(text_ids[:, 4:-5]), tts_eos), dim=1)
    else:
        both = torch.cat((ids["ref"][:, 3:-2], text_ids[:, TEXT]), dim=-1)
        text = torch.cat((talker.embed_text(both), tts_eos), dim=1)  # [1, T1, H]
        frames = talker.embed_frame(ref_code.to(dev))[None]  # [1, F, H]
        stream = torch.cat((talker.embed_codec(ids["bos"]), frames), dim=1)  # [1, T2, H]
        n = stream.shape[1]
        if text.shape[1] > n:
            parts.append(text[:, :n] + stream)
            trailing = text[:, n:]
        else:
            padded = torch.cat([text] + [tts_pad] * (n - text.shape[1]), dim=1)  # [1, T2, H]
            parts.append(padded + stream)
            trailing = tts_pad
    return Prompt(embeds=torch.cat(parts, dim=1)[0], trailing=trailing[0])


def pad_embedding(talker, config: ModelConfig) -> torch.Tensor:
    """P(tts_pad) [H], added to every decode step past a row's trailing text. Computed inside the
    same [bos, eos, pad] batch as embed_prompt so the values are bitwise identical."""
    dev = talker.model.codec_embedding.weight.device
    special = ids_to_device({"special": _special_ids(config)}, dev)["special"]  # [1, 3]
    return talker.embed_text(special)[0, 2]


def clone_tokens(
    tokens: PromptTokens, tokenizer, ref_text: str | None, ref_frames: int
) -> PromptTokens:
    """Voice-clone ids: x-vector only when ref_text is None, else ICL over `ref_frames` codes."""
    if ref_text is None:
        return replace(tokens, clone=True)
    ref_ids = encode(tokenizer, reference_template(ref_text))
    return replace(tokens, clone=True, ref_ids=ref_ids, ref_frames=ref_frames)


def prompt_length(tokens: PromptTokens) -> int:
    """Prefill positions embed_prompt / embed_clone_prompt produce (sizes caches up front)."""
    instruct = len(tokens.instruct_ids) if tokens.instruct_ids else 0
    speaker = tokens.speaker_id is not None or tokens.clone
    codec = len(tokens.codec_prefix) + speaker + 2  # + [pad, bos]
    text = len(tokens.text_ids) - 8  # the template adds 3 ids before the text and 5 after
    head = instruct + 3 + (codec - 1)
    if not tokens.clone:
        return head + (text + 1) + 1
    if tokens.ref_ids is None:
        return head + 1  # first text token + C(bos)
    return head + 1 + tokens.ref_frames  # [C(bos), ref frames] under the text stream


def trailing_length(tokens: PromptTokens) -> int:
    """Rows of Prompt.trailing for these ids (sizes the engine's per-slot text buffer)."""
    if not tokens.clone:
        return 1
    text = len(tokens.text_ids) - 8
    if tokens.ref_ids is None:
        return text  # T1..T_{N-1} and tts_eos
    stream = (len(tokens.ref_ids) - 5) + text + 1  # ref text, text, tts_eos
    return max(stream - (1 + tokens.ref_frames), 1)
