"""Golden cases: the rows each checkpoint speaks, the calls that batch them, and running them.

Owns: row and case definitions, the stop plan per checkpoint (which rows the aimed EOS stops
and at which step), and running one case through the official wrapper while capturing what
the wrapper passed to and got back from `model.generate`.

Must not know: weights, EOS solving, file formats of the fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    text: str
    speaker: str | None
    language: str
    instruct: str | None


ROWS = {
    "cv17": {
        "en": Row("Hello world, this is a test of the speech model.", "Vivian", "English", None),
        "auto": Row("The weather is nice today and we walk in the park.", "ryan", "Auto", None),
        "eric_zh": Row("今天天气很好，我们去公园散步吧。", "eric", "chinese", None),
        "dylan_auto": Row("北京的秋天很美。", "Dylan", "auto", None),
        "instruct": Row(
            "Please read this sentence slowly.",
            "serena",
            "English",
            "Speak in a calm and gentle voice.",
        ),
        "mixed": Row("HeLLo WoRLD, ThIs iS QWEN tts", "aiden", "English", None),
    },
    "cv06": {
        "aiden_ins": Row("Good morning, how are you?", "aiden", "English", "Whisper very softly."),
        "eric_zh": Row("你好，世界。", "Eric", "Chinese", "Speak loudly."),
        "dylan_auto": Row("Let us go home.", "dylan", "Auto", None),
    },
    "vd": {
        "design": Row(
            "It is a bright and sunny day.", None, "English", "A deep male voice, slow and warm."
        ),
        "empty": Row("What a wonderful world!", None, "auto", ""),
    },
}

# Stop step k (the row yields k frames) or None (runs to max_new_tokens: N - 1 frames).
STOP_PLAN = {
    "cv17": {"auto": 4, "dylan_auto": 8},
    "cv06": {"eric_zh": 5},
    "vd": {"design": 6},
}

MAX_NEW_TOKENS = {"cv17": 14, "cv06": 12, "vd": 12}
CALL = {"cv17": "custom_voice", "cv06": "custom_voice", "vd": "voice_design"}


@dataclass(frozen=True)
class Case:
    name: str
    checkpoint: str
    rows: tuple[str, ...]


CASES = [
    Case("cv17_english_vivian", "cv17", ("en",)),
    Case("cv17_auto", "cv17", ("auto",)),
    Case("cv17_eric_chinese_dialect", "cv17", ("eric_zh",)),
    Case("cv17_dylan_auto_dialect", "cv17", ("dylan_auto",)),
    Case("cv17_instruct", "cv17", ("instruct",)),
    Case("cv17_mixed_case", "cv17", ("mixed",)),
    Case("cv17_batch", "cv17", ("en", "auto", "eric_zh", "dylan_auto", "instruct", "mixed")),
    Case("cv06_instruct_ignored", "cv06", ("aiden_ins",)),
    Case("cv06_batch_dialects", "cv06", ("aiden_ins", "eric_zh", "dylan_auto")),
    Case("vd_instruct", "vd", ("design",)),
    Case("vd_batch_empty_instruct", "vd", ("design", "empty")),
]


def run_rows(tts, checkpoint: str, rows: list[Row], max_new_tokens: int) -> dict:
    """One official wrapper call over `rows`; returns ids passed in, codes and audio out."""
    captured: dict = {}
    inner = tts.model.generate

    def spy(*args, **kwargs):
        captured["input_ids"] = [t[0].tolist() for t in kwargs["input_ids"]]
        ins = kwargs.get("instruct_ids")
        captured["instruct_ids"] = [
            None if t is None else t[0].tolist() for t in (ins or [None] * len(rows))
        ]
        out = inner(*args, **kwargs)
        captured["codes"] = [c.detach().cpu().long().numpy() for c in out[0]]
        return out

    tts.model.generate = spy
    try:
        texts = [r.text for r in rows]
        langs = [r.language for r in rows]
        instructs = [r.instruct for r in rows]
        if CALL[checkpoint] == "custom_voice":
            wavs, sr = tts.generate_custom_voice(
                text=texts,
                speaker=[r.speaker for r in rows],
                language=langs,
                instruct=instructs,
                max_new_tokens=max_new_tokens,
            )
        else:
            wavs, sr = tts.generate_voice_design(
                text=texts, instruct=instructs, language=langs, max_new_tokens=max_new_tokens
            )
    finally:
        tts.model.generate = inner
    if sr != 24000:
        raise ValueError(f"official wrapper returned sample rate {sr}, expected 24000")
    captured["audio"] = [w.astype("float32") for w in wavs]
    return captured
