"""One job end to end: read rows -> validate all (before any weights load) -> lock the out dir ->
resume filter -> schedule -> synthesize -> write -> results and summary.

This module owns the job's settings (JobSpec), the sampling options built from the checkpoint's
defaults and the command line, and the preparation up to the lock; the locked part runs in
qtts.core.jobs.locked_run. The model comes in through injected factories
(qtts.core.jobs.interfaces), so the CLI passes the real ones and tests pass fakes. Knows no
tensors and no command-line parsing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from qtts.core.jobs.budget import FrameBudget
from qtts.core.jobs.interfaces import LoadSynthesizer, OpenTextModel, ProgressSink, TextModel
from qtts.core.jobs.lock import OutDirLock
from qtts.core.jobs.locked_run import JobRun, JobSummary
from qtts.core.jobs.manifest import (
    InputRow,
    ManifestError,
    check_unique_ids,
    read_parquet_manifest,
    read_text_lines,
)
from qtts.core.jobs.requests import GenerationOptions
from qtts.core.jobs.validation import RowDefaults, validate_rows
from qtts.core.jobs.writer import AUDIO_FORMATS
from qtts.core.model.config import GenerationDefaults, SamplingParams

log = logging.getLogger("qtts")

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


@dataclass(frozen=True)
class JobSpec:
    kind: str  # "synth" (text lines) | "batch" (Parquet manifest)
    source: str  # path, or "-" for stdin (synth)
    out_dir: Path
    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 16
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

    def __post_init__(self) -> None:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.kind not in ("synth", "batch"):
            raise ValueError(f"unknown job kind {self.kind!r}")
        if self.audio_format not in AUDIO_FORMATS:
            raise ValueError(f"--format must be wav or flac, got {self.audio_format!r}")
        if self.on_budget not in ON_BUDGET:
            raise ValueError(f"--on-budget must be ok or fail, got {self.on_budget!r}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.max_failures is not None and self.max_failures < 1:
            raise ValueError(f"--max-failures must be >= 1, got {self.max_failures}")


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
        raise ValueError(f"{prefix}temperature must be > 0 (use --greedy for argmax)")
    if p.top_k < 0:
        raise ValueError(f"{prefix}top-k must be >= 0 (0 turns it off)")
    if not 0 < p.top_p <= 1:
        raise ValueError(f"{prefix}top-p must be in (0, 1]")
    if p.repetition_penalty <= 0:
        raise ValueError("--repetition-penalty must be > 0 (1.0 turns it off)")


def read_rows(spec: JobSpec) -> list[InputRow]:
    rows = (
        read_text_lines(spec.source) if spec.kind == "synth" else read_parquet_manifest(spec.source)
    )
    check_unique_ids(rows)
    return rows


def apply_reference_defaults(rows: list[InputRow], spec: JobSpec) -> list[InputRow]:
    """--ref-audio/--ref-text fill rows without their own; --x-vector-only drops every ref_text.
    A command-line path is relative to the working directory (a manifest's to the manifest)."""
    if spec.ref_audio is None and spec.ref_text is None and not spec.x_vector_only:
        return rows
    audio = str(Path(spec.ref_audio).expanduser().absolute()) if spec.ref_audio else None
    out = []
    for r in rows:
        text = None if spec.x_vector_only else _or(r.ref_text, spec.ref_text)
        out.append(replace(r, ref_audio=_or(r.ref_audio, audio), ref_text=text))
    return out


def _or(value, default):
    return value if value is not None else default


def check_shared_voice(rows: list[InputRow], model: TextModel, defaults: RowDefaults) -> None:
    """When every row takes the command-line voice, a bad --speaker/--language is a usage error."""
    per_row = any(r.speaker or r.language or r.instruct for r in rows)
    if rows and not per_row:
        try:
            model.normalize_row(defaults.speaker, defaults.language, defaults.instruct)
        except ValueError as e:
            raise ManifestError(f"{e} (set it with --speaker/--language)") from None


def run_job(
    spec: JobSpec,
    open_text_model: OpenTextModel,
    load_synthesizer: LoadSynthesizer,
    progress: ProgressSink | None = None,
) -> JobSummary:
    """Run one job. Raises ManifestError (exit 2) before anything is written, LockHeldError (75),
    ModelLoadError / DiskFullError / OutputError (1); otherwise returns the summary."""
    rows = apply_reference_defaults(read_rows(spec), spec)
    text_model = open_text_model(spec.model)
    check_shared_voice(rows, text_model, spec.row_defaults)
    try:
        options = generation_options(text_model.defaults, spec.sampling)
        budget = FrameBudget(text_model.defaults.max_new_tokens, spec.max_new_tokens)
    except ValueError as e:
        raise ManifestError(str(e)) from None
    ref_dir = Path(spec.source).resolve().parent if spec.kind == "batch" else None
    validated = validate_rows(rows, text_model, budget, spec.row_defaults, ref_dir=ref_dir)
    for message, count in validated.warnings.items():
        log.warning("%s (%d row%s)", message, count, "" if count == 1 else "s")
    if not rows:
        log.warning("%s has no rows: nothing to do", spec.source)
    spec = replace(spec, out_dir=Path(spec.out_dir))
    try:
        spec.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ManifestError(f"cannot create out dir {spec.out_dir}: {e.strerror or e}") from None
    with OutDirLock(spec.out_dir):
        run = JobRun(spec, text_model, rows, validated, options, load_synthesizer, progress)
        return run.execute()
