"""What flows between the job layer and the synthesizer: validated requests in, utterances out.

Plain data, no tensors: the synthesizer's API, which the jobs layer imports without torch. It also
owns the rule for seeds derived from a row's seed (a segment's, a retry's): a pure function of
the seed and a salt, so a derived draw is as batch-invariant as the row's own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from qtts.core.model.config import SamplingParams


@dataclass(frozen=True)
class Placement:
    """Where a synthesizer runs and how many rows it decodes at once: --device, --dtype and
    --batch-size as given, travelling together from the job's options to the loaded weights
    ("auto" is resolved where the weights are loaded)."""

    device: str = "auto"  # auto, cpu, cuda or cuda:N
    dtype: str = "auto"  # auto, float32, bfloat16 or float16
    batch_size: int | None = None  # slots; None: the memory plan decides (--batch-size auto)


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
    ref_text: str | None = None  # with a voice: its transcript (None: x-vector mode)
    voice: str | None = None  # Base: a voice file (qtts.core.model.voice_file), not ref_audio
    # Talker step budget, as the official max_new_tokens: at most max_new_tokens - 1 frames when the
    # row never emits EOS (the last sampled token never gets its residual codes).
    max_new_tokens: int = 2048


def derive_seed(seed: int, salt: str) -> int:
    """A seed derived from `seed` and `salt`: a hash of both, in [0, 2**63)."""
    digest = hashlib.blake2b(f"{seed}/{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def attempt_seed(seed: int, attempt: int) -> int:
    """The seed of attempt `attempt` (1-based) of a request seeded `seed`: the first attempt is the
    request itself; each later one draws with its own derived seed."""
    return seed if attempt == 1 else derive_seed(seed, f"attempt{attempt}")


@dataclass(frozen=True)
class GenerationOptions:
    """Job-wide sampling for the two sampling sites; per-row seeds live on each Request."""

    talker: SamplingParams
    subtalker: SamplingParams
    # Tries a request gets while it hits its frame budget (--on-budget retry); 1: no retry.
    max_attempts: int = 1

    @property
    def attempts(self) -> int:
        """The tries worth making: with neither site sampling, another seed gives the same codes."""
        if self.max_attempts == 1:
            return 1
        sampled = self.talker.do_sample or self.subtalker.do_sample
        return self.max_attempts if sampled else 1


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
    attempts: int = 1  # tries it took (GenerationOptions.max_attempts); a split row: its most
    seed: int | None = None  # the seed that drew these codes (attempt_seed); None: the request's
    segment_seeds: tuple[int, ...] | None = None  # a split row: each segment's kept seed
    segment_chars_per_s: tuple[float, ...] | None = None  # a split row: each segment's rate


@dataclass
class RowFailure:
    """A request that failed on its own (bad reference audio, non-finite audio, ...)."""

    id: str
    error: str
    attempts: int | None = None  # the tries made, when the failure came from them
