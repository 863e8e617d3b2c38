"""What the job layer needs of a model (a cheap text side, an expensive synthesizer) and of a
progress sink: qtts.core.synthesis.session implements them, tests fake them, the CLI shows
progress. Knows no tensors and no files."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from qtts.core.model.config import GenerationDefaults, ModelConfig
from qtts.core.synthesis.requests import (
    GenerationOptions,
    Placement,
    Request,
    RowFailure,
    Utterance,
)


class TextModel(Protocol):
    """Config + text tokenizer, no weights: enough to validate, schedule and plan every row."""

    name: str  # the --model string
    config: ModelConfig
    defaults: GenerationDefaults
    sample_rate: int
    identity: str  # digest of what the checkpoint's files hold (config, tokenizer, weights)
    voice_identity: str | None  # what its voice files carry; None: not a Base checkpoint
    # Most text tokens a UTF-8 byte can give; None when unknown: every length check tokenizes.
    max_tokens_per_byte: float | None

    def normalize_row(
        self, speaker: str | None, language: str | None, instruct: str | None
    ) -> tuple[str | None, str, str | None, str | None]:
        """(speaker, language, instruct, warning or None); VoiceError(reason, field) if unusable."""

    def count_text_tokens(self, texts: Sequence[str]) -> list[int]:
        """Text tokens of each text (one batched tokenizer call)."""

    def resolve_precision(self, device: str, dtype: str) -> tuple[str, str, str]:
        """(device type "cpu" or "cuda", dtype name, why --dtype auto resolves so; "" for an
        explicit dtype) for --device and --dtype here; UsageError when the device is absent."""

    def memory_plan(self, requests: Sequence[Request], placement: Placement) -> str:
        """One line: how these rows would batch on the device, from the checkpoint's dimensions."""


class Synthesizer(Protocol):
    """Weights loaded. Yields each request exactly once, in completion order."""

    def synthesize(
        self, requests: Sequence[Request], options: GenerationOptions
    ) -> Iterator[Utterance | RowFailure]: ...


class ProgressSink(Protocol):
    """Told how many rows a job will synthesize (and their planned audio) and when each
    finishes. A split row reports each segment as it is made; its advance, given its row_id, then
    counts only what the segments did not (or takes their audio back: a failed row)."""

    def start(self, total: int, planned_audio_s: float = 0.0) -> None: ...
    def advance(self, rows: int, audio_s: float, row_id: str | None = None) -> None: ...
    def segment(self, row_id: str, audio_s: float) -> None: ...
    def close(self) -> None: ...


class NoProgress(ProgressSink):
    """A sink that shows nothing (the protocol's methods do nothing)."""


OpenTextModel = Callable[[str], TextModel]
LoadSynthesizer = Callable[[TextModel, Placement], Synthesizer]
