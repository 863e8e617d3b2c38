"""Voice-clone golden cases (Base checkpoint): reference clips, rows, stop plan, and one official
`generate_voice_clone` call per case with what the wrapper passed to `model.generate` captured.

Owns: the reference clip synthesis (deterministic, 24 kHz PCM-16 wav), row and case definitions,
and running a case through the official wrapper.

Must not know: weights, EOS solving, fixture file formats.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 24000

# name -> (seconds, seed, fundamental Hz). Both are 24 kHz, so the official code resamples nothing.
REFS = {"ref_a": (1.6, 11, 140.0), "ref_b": (2.3, 12, 210.0)}


def synth_reference(seconds: float, seed: int, f0: float) -> np.ndarray:
    """Speech-like test clip: gliding harmonics under a syllable envelope, plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    pitch = f0 * (1.0 + 0.15 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / SAMPLE_RATE
    voice = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = np.abs(np.sin(2 * np.pi * 2.5 * t)) ** 0.5
    wav = voice * envelope + 0.02 * rng.standard_normal(t.shape)
    return (0.5 * wav / np.abs(wav).max()).astype(np.float32)


def write_references(out_dir: Path) -> dict[str, Path]:
    import soundfile as sf

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (seconds, seed, f0) in REFS.items():
        path = out_dir / f"{name}.wav"
        sf.write(str(path), synth_reference(seconds, seed, f0), SAMPLE_RATE, subtype="PCM_16")
        path.chmod(0o644)
        paths[name] = path
    return paths


@dataclass(frozen=True)
class Row:
    text: str
    language: str
    ref: str  # key of REFS
    ref_text: str | None
    x_vector_only: bool


ROWS = {
    # ICL, text longer than the reference codes: trailing text rows after the prompt.
    "icl_long": Row(
        "Hello world, this is a test of the speech model, and it keeps going for a while.",
        "English",
        "ref_a",
        "This is the reference.",
        False,
    ),
    # ICL, text shorter than the reference codes: text padded with tts_pad, trailing = tts_pad.
    "icl_short": Row("Hi there.", "Auto", "ref_b", "A second reference clip.", False),
    "icl_zh": Row("今天天气很好。", "chinese", "ref_a", "参考音频。", False),
    # x-vector only: the streaming non-ICL layout (first text token in the prompt, rest trailing).
    "xvec": Row("The weather is nice today and we walk in the park.", "Auto", "ref_b", None, True),
    "xvec_with_text": Row("Good morning.", "english", "ref_a", "This is ignored.", True),
}

# Stop step k (the row yields k frames) or None (runs to max_new_tokens: N - 1 frames).
STOP_PLAN = {"icl_long": 5, "xvec": 7}
MAX_NEW_TOKENS = 12


@dataclass(frozen=True)
class Case:
    name: str
    rows: tuple[str, ...]


CASES = [
    Case("base_icl_long", ("icl_long",)),
    Case("base_icl_short", ("icl_short",)),
    Case("base_xvec", ("xvec",)),
    Case("base_batch", ("icl_long", "xvec", "icl_short", "icl_zh", "xvec_with_text")),
]


def run_rows(tts, rows: list[Row], refs: dict[str, Path], max_new_tokens: int) -> dict:
    """One official generate_voice_clone call; returns ids, prompt pieces, codes and audio."""
    captured: dict = {}
    inner = tts.model.generate

    def spy(*args, **kwargs):
        captured["input_ids"] = [t[0].tolist() for t in kwargs["input_ids"]]
        captured["ref_ids"] = [None if t is None else t[0].tolist() for t in kwargs["ref_ids"]]
        vcp = kwargs["voice_clone_prompt"]
        captured["ref_code"] = [
            None if c is None else c.detach().cpu().long().numpy() for c in vcp["ref_code"]
        ]
        captured["xvector"] = [e.detach().cpu().float().numpy() for e in vcp["ref_spk_embedding"]]
        out = inner(*args, **kwargs)
        captured["codes"] = [c.detach().cpu().long().numpy() for c in out[0]]
        return out

    tts.model.generate = spy
    try:
        wavs, sr = tts.generate_voice_clone(
            text=[r.text for r in rows],
            language=[r.language for r in rows],
            ref_audio=[str(refs[r.ref]) for r in rows],
            ref_text=[r.ref_text for r in rows],
            x_vector_only_mode=[r.x_vector_only for r in rows],
            max_new_tokens=max_new_tokens,
        )
    finally:
        tts.model.generate = inner
    if sr != SAMPLE_RATE:
        raise ValueError(f"official wrapper returned sample rate {sr}, expected {SAMPLE_RATE}")
    captured["audio"] = [w.astype("float32") for w in wavs]
    return captured
