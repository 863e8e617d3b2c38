"""One job end to end: read rows -> validate all (before any weights load) -> lock the out dir ->
resume filter -> schedule -> synthesize -> write -> results and summary.

This module owns the preparation up to the lock (the settings live in qtts.core.jobs.spec); the
locked part runs in qtts.core.jobs.locked_run. The model comes in through injected factories
(qtts.core.jobs.interfaces), so the CLI passes the real ones and tests pass fakes. Knows no
tensors and no command-line parsing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from qtts.core.jobs.budget import FrameBudget
from qtts.core.jobs.interfaces import LoadSynthesizer, OpenTextModel, ProgressSink, TextModel
from qtts.core.jobs.lock import OutDirLock
from qtts.core.jobs.locked_run import JobRun
from qtts.core.jobs.manifest import (
    InputRow,
    ManifestError,
    check_unique_ids,
    read_parquet_manifest,
    read_text_lines,
)
from qtts.core.jobs.results import JobFile, write_job_file
from qtts.core.jobs.shards import local_rank_device, resolve_shard
from qtts.core.jobs.spec import JobSpec, generation_options
from qtts.core.jobs.summary import JobSummary
from qtts.core.jobs.validation import RowDefaults, validate_rows

log = logging.getLogger("qtts")


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
    env: Mapping[str, str] = os.environ,
) -> JobSummary:
    """Run one job (one shard of it when sharded: --num-shards/--shard-index, or a Slurm array,
    srun or torchrun environment). Raises ManifestError (exit 2) before anything is written,
    LockHeldError (75), ModelLoadError / DiskFullError / OutputError (1); otherwise returns the
    summary."""
    all_rows = apply_reference_defaults(read_rows(spec), spec)
    try:
        shard = resolve_shard(spec.num_shards, spec.shard_index, env)
    except ValueError as e:
        raise ManifestError(str(e)) from None
    rows = [r for r in all_rows if shard.owns(r.id)]
    if shard.sharded:
        log.info("%s: %d of %d rows", shard.describe(), len(rows), len(all_rows))
        spec = replace(spec, device=local_rank_device(spec.device, env))
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
    source = spec.source if spec.source == "-" else str(Path(spec.source).resolve())
    job = JobFile(spec.kind, source, spec.audio_format, shard.count)
    args = (spec, text_model, rows, validated, options, load_synthesizer, progress)
    if spec.backend == "ray":
        from qtts.core.jobs.ray_backend import RayJobRun, RayOptions, import_ray

        import_ray()  # not installed: one line saying how, before the out dir is locked
        options_ray = RayOptions(spec.ray_address, spec.workers, spec.gpus_per_worker)
        run = RayJobRun(*args, ray_options=options_ray, open_text_model=open_text_model)
    else:
        run = JobRun(*args, shard=shard, all_rows=all_rows)
    with OutDirLock(spec.out_dir, shard.lock_name):
        write_job_file(spec.out_dir, job)
        return run.execute()
