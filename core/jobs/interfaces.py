"""What the job layer needs from a model: a cheap text side and an expensive synthesizer.

The job layer (qtts.core.jobs.run) is written against these Protocols only;
qtts.core.synthesis.session provides the real implementations and tests provide fakes; the CLI
provides a ProgressSink.
Knows no tensors and no files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from qtts.core.model.config import GenerationDefaults, ModelConfig
from qtts.core.synthesis.requests import GenerationOptions, Request, RowFailure, Utterance


class TextModel(Protocol):
    """Config + text tokenizer, no weights: enough to validate and schedule every row."""

    name: str  # the --model string
    config: ModelConfig
    defaults: GenerationDefaults
    sample_rate: int

    def normalize_row(
        self, speaker: str | None, language: str | None, instruct: str | None
    ) -> tuple[str | None, str, str | None, str | None]:
        """-> (speaker, language, instruct, warning or None); ValueError(reason) if unusable."""
        ...

    def count_text_tokens(self, text: str) -> int: ...


class Synthesizer(Protocol):
    """Weights loaded. Yields each request exactly once, in completion order."""

    def synthesize(
        self, requests: Sequence[Request], options: GenerationOptions
    ) -> Iterator[Utterance | RowFailure]: ...


class ProgressSink(Protocol):
    """Told how many rows a job will synthesize and when each finishes (ok or failed)."""

    def start(self, total: int) -> None: ...
    def advance(self, rows: int, audio_s: float) -> None: ...
    def close(self) -> None: ...


class NoProgress:
    def start(self, total: int) -> None: ...
    def advance(self, rows: int, audio_s: float) -> None: ...
    def close(self) -> None: ...


OpenTextModel = Callable[[str], TextModel]
LoadSynthesizer = Callable[
    [TextModel, str, str, int | None], Synthesizer
]  # (.., device, dtype, batch)
