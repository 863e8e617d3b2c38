"""What flows between the job layer and the synthesizer: validated requests in, utterances out.

Plain data, no tensors: the synthesizer's API, which the jobs layer imports without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtts.core.model.config import SamplingParams


@dataclass(frozen=True)
class Request:
    """One validated row, ready to synthesize."""

    id: str  # output stem: OUT/{id}.wav
    text: str
    row: int  # 1-based row (manifest) or line number (text file) it came from
    speaker: str | None = None  # lower-cased; CustomVoice only
    language: str = "auto"  # lower-cased
    instruct: str | None = None  # None when empty or ignored by the model
    seed: int = 0
    ref_audio: str | None = None  # Base (voice clone) only
    ref_text: str | None = None
    # Talker step budget, as the official max_new_tokens: at most max_new_tokens - 1 frames when the
    # row never emits EOS (the last sampled token never gets its residual codes).
    max_new_tokens: int = 2048


@dataclass(frozen=True)
class GenerationOptions:
    """Job-wide sampling for the two sampling sites; per-row seeds live on each Request."""

    talker: SamplingParams
    subtalker: SamplingParams


@dataclass
class Utterance:
    """One finished request."""

    id: str
    codes: np.ndarray  # int64 [frames, num_code_groups]
    audio: np.ndarray  # float32 [samples], 24 kHz mono, in [-1, 1]
    sample_rate: int
    hit_frame_budget: bool  # stopped by max_new_tokens, not by EOS
    # A row the job layer split into segments and joined: each segment's frames, in order (codes
    # holds them one after another). None for a request synthesized whole.
    segment_frames: tuple[int, ...] | None = None


@dataclass
class RowFailure:
    """A request that failed on its own (bad reference audio, non-finite audio, ...)."""

    id: str
    error: str
