"""The closed sets a job's options choose from, for the command line and the core: str Enums that
compare equal to, and print as, their spelling. Standard library only: the CLI builds `--help`
from it without torch or pyarrow. The output layouts are the output registry's own Choice."""

from __future__ import annotations

from enum import Enum

from qtts.core.errors import UsageError

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"


class Choice(str, Enum):
    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | Choice, option: str) -> Choice:
        """The member spelled `value`, or a UsageError naming the option and the choices."""
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise UsageError(f"{option} must be one of {names}, got {value!r}") from None


class Dtype(Choice):
    auto = "auto"  # bfloat16 on CUDA; on a CPU by its bf16 units, pinned per out dir
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class AudioFormat(Choice):
    wav = "wav"
    flac = "flac"


# Rows per archive shard: ~480 MB of 10 s WAV clips, the size WebDataset readers stream well.
DEFAULT_SHARD_ROWS = 1000


class OnBudget(Choice):
    ok = "ok"  # kept, flagged hit_frame_budget
    fail = "fail"
    retry = "retry"  # synthesized again with a derived seed, up to --max-attempts; then failed


class BackendName(Choice):
    """--backend: which backend runs the rows (a backend itself is locked_run.Backend)."""

    local = "local"  # this process and device
    ray = "ray"  # Ray Data actors (qtts.core.jobs.execution.ray_backend)


class Split(Choice):
    auto = "auto"  # rows longer than --max-segment-tokens, at sentence ends (then clauses)
    sentence = "sentence"  # every row at every sentence end
    none = "none"  # every row whole
