"""A job's settings, as the command line gave them: JobSpec (validated on construction) and the
sampling overrides, with the rule that merges them into the checkpoint's generation defaults.

Plain data; knows no files, no model and no torch (the rest of qtts.core.jobs reads it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from qtts.core.errors import UsageError
from qtts.core.jobs.validation import RowDefaults
from qtts.core.jobs.writer import AUDIO_FORMATS
from qtts.core.model.config import GenerationDefaults, SamplingParams
from qtts.core.synthesis.requests import GenerationOptions

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
ON_BUDGET = ("ok", "fail")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class SamplingOverrides:
    """Command-line sampling values; None keeps the checkpoint's generation_config.json value."""

    greedy: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    subtalker_temperature: float | None = None
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None


BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class JobSpec:
    kind: str  # "synth" (text lines) | "batch" (Parquet manifest)
    source: str  # path, or "-" for stdin (synth)
    out_dir: Path
    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int | None = None  # None: the memory plan decides (--batch-size auto)
    max_new_tokens: int | None = None
    row_defaults: RowDefaults = RowDefaults()
    sampling: SamplingOverrides = field(default_factory=SamplingOverrides)
    audio_format: str = "wav"
    save_codes: bool = False
    overwrite: bool = False
    max_failures: int | None = None  # stop after this many failed rows; 1 = --fail-fast
    on_budget: str = "ok"  # a row that hits the frame budget: "ok" (flagged) or "fail"
    ref_audio: str | None = None  # Base: reference clip for rows without one
    ref_text: str | None = None  # Base: its transcript (ICL); none -> x-vector only
    x_vector_only: bool = False  # Base: ignore every ref_text (x-vector cloning)
    num_shards: int | None = None  # with shard_index: run rows with sha1(id) % N == I only
    shard_index: int | None = None
    backend: str = "local"  # "ray": Ray Data actors (qtts.core.jobs.ray_backend)
    ray_address: str | None = None
    workers: int | None = None  # ray actors
    gpus_per_worker: float | None = None
    ray_timeout: float = 30.0  # seconds to reach --ray-address before giving up
    dry_run: bool = False  # plan and report; load no weights, write nothing
    input_moved: bool = False  # the out dir's recorded input moved here: adopt this path

    def __post_init__(self) -> None:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise UsageError(f"--device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.kind not in ("synth", "batch"):
            raise UsageError(f"unknown job kind {self.kind!r}")
        if self.audio_format not in AUDIO_FORMATS:
            raise UsageError(f"--format must be wav or flac, got {self.audio_format!r}")
        if self.on_budget not in ON_BUDGET:
            raise UsageError(f"--on-budget must be ok or fail, got {self.on_budget!r}")
        if self.batch_size is not None and self.batch_size < 1:
            raise UsageError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.backend not in BACKENDS:
            raise UsageError(f"--backend must be local or ray, got {self.backend!r}")
        if self.backend == "ray" and (self.num_shards or 1) > 1:
            raise UsageError("--backend ray spreads one job over the cluster: no --num-shards")
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"--workers must be >= 1, got {self.workers}")
        if self.gpus_per_worker is not None and self.gpus_per_worker < 0:
            raise UsageError(f"--gpus-per-worker must be >= 0, got {self.gpus_per_worker}")
        if self.max_failures is not None and self.max_failures < 1:
            raise UsageError(f"--max-failures must be >= 1, got {self.max_failures}")
        if self.ray_timeout <= 0:
            raise UsageError(f"--ray-timeout must be > 0 seconds, got {self.ray_timeout}")


def generation_options(defaults: GenerationDefaults, o: SamplingOverrides) -> GenerationOptions:
    """The checkpoint's defaults, overridden by whatever the command line set."""

    def pick(value, default):
        return default if value is None else value

    talker = SamplingParams(
        do_sample=defaults.talker.do_sample and not o.greedy,
        temperature=pick(o.temperature, defaults.talker.temperature),
        top_k=pick(o.top_k, defaults.talker.top_k),
        top_p=pick(o.top_p, defaults.talker.top_p),
        repetition_penalty=pick(o.repetition_penalty, defaults.talker.repetition_penalty),
    )
    subtalker = SamplingParams(
        do_sample=defaults.subtalker.do_sample and not o.greedy,
        temperature=pick(o.subtalker_temperature, defaults.subtalker.temperature),
        top_k=pick(o.subtalker_top_k, defaults.subtalker.top_k),
        top_p=pick(o.subtalker_top_p, defaults.subtalker.top_p),
        repetition_penalty=defaults.subtalker.repetition_penalty,
    )
    for name, p in (("talker", talker), ("subtalker", subtalker)):
        _check_sampling(name, p)
    return GenerationOptions(talker=talker, subtalker=subtalker)


def _check_sampling(name: str, p: SamplingParams) -> None:
    prefix = "--" if name == "talker" else "--subtalker-"
    if p.temperature <= 0:
        raise UsageError(f"{prefix}temperature must be > 0 (use --greedy for argmax)")
    if p.top_k < 0:
        raise UsageError(f"{prefix}top-k must be >= 0 (0 turns it off)")
    if not 0 < p.top_p <= 1:
        raise UsageError(f"{prefix}top-p must be in (0, 1]")
    if p.repetition_penalty <= 0:
        raise UsageError("--repetition-penalty must be > 0 (1.0 turns it off)")
