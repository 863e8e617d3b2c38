"""One job up to its locked run: rows read and validated before any weights load, the out dir's
record checked, the precision settled; then the dry run, or the Ray cluster reached, the shard
locked and the job recorded (docs/architecture.md, "One pass"). Nothing is written until the
input, options, device and cluster are known good; the model comes in through injected factories.
Knows no tensors and no command-line parsing.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import ManifestError, UsageError, VoiceError
from qtts.core.jobs.contract.choices import Dtype
from qtts.core.jobs.contract.interfaces import (
    LoadSynthesizer,
    OpenTextModel,
    ProgressSink,
    TextModel,
)
from qtts.core.jobs.contract.spec import JobSpec
from qtts.core.jobs.execution.generation import generation_options
from qtts.core.jobs.execution.local_backend import LocalBackend, with_segment_progress
from qtts.core.jobs.execution.locked_run import LockedRun, RunSetup
from qtts.core.jobs.execution.out_dir import (
    make_out_dir,
    settle_output,
    with_recorded_output,
    write_job_files,
)
from qtts.core.jobs.execution.summary import JobSummary
from qtts.core.jobs.output.stores.presence import list_out_dir
from qtts.core.jobs.output.stores.registry import find
from qtts.core.jobs.rows.manifest import check_unique_ids, read_manifest, read_text_lines
from qtts.core.jobs.rows.sources import ManifestSource, find_manifest
from qtts.core.jobs.rows.validation import RowDefaults, prepare_rows
from qtts.core.jobs.rows.voices import check_voice_flag
from qtts.core.jobs.state.jobfile import (
    check_input,
    read_job_file,
    resolve_shard,
    seed_rule_for,
)
from qtts.core.jobs.state.lock import OutDirLock
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.records import empty, one_chunk
from qtts.core.jobs.state.ref_digests import RefDigests
from qtts.core.jobs.state.shards import ShardRequest, local_rank_device, shard_request
from qtts.core.jobs.work.budget import FrameBudget
from qtts.core.jobs.work.fingerprint import job_fingerprint
from qtts.core.jobs.work.precision import for_ray_actors, log_precision, settle_precision
from qtts.core.jobs.work.split_rules import settle_segment_limit
from qtts.core.synthesis.requests import GenerationOptions

log = logging.getLogger("qtts")


def read_rows(spec: JobSpec, manifest: ManifestSource | None = None) -> pa.Table:
    """The input's rows, ids checked (manifest: what find_manifest made of spec.source)."""
    if spec.kind == "synth":
        rows = read_text_lines(spec.source)
    else:
        rows = read_manifest(manifest or spec.source, spec.columns)
    if rows.num_rows == 0:
        # Refused, not a quiet no-op: an empty input is most often a wrong path or a truncated
        # export, and running it would record it in the out dir, which then refuses the right one.
        name = "stdin" if spec.source == "-" else spec.source
        blank = " (no non-blank line)" if spec.kind == "synth" else ""
        raise ManifestError(f"{name} has no rows{blank}: nothing to do")
    check_unique_ids(rows)
    held = [rows]
    del rows
    rows = one_chunk(held)  # one chunk: every later take() is one pass, not a concat each
    pa.default_memory_pool().release_unused()  # the reader's buffers: a million rows' worth
    return rows


def apply_reference_defaults(rows: pa.Table, spec: JobSpec) -> pa.Table:
    """--ref-audio/--ref-text, or --voice, fill rows with neither a ref_audio nor a voice of their
    own (--ref-text: rows without a voice); --x-vector-only drops every ref_text. A command-line
    path is relative to the working directory (a manifest's to the manifest)."""
    own = pc.or_(pc.is_valid(rows["ref_audio"]), pc.is_valid(rows["voice"]))
    for name, given in (("ref_audio", spec.voice.ref_audio), ("voice", spec.voice.voice)):
        if given is not None:
            path = pa.scalar(str(Path(given).expanduser().absolute()), pa.string())
            rows = rows.set_column(
                rows.schema.get_field_index(name), name, pc.if_else(own, rows[name], path)
            )
    text = rows["ref_text"]
    if spec.voice.x_vector_only:
        text = pa.nulls(rows.num_rows, pa.string())
    elif spec.voice.ref_text is not None:
        fill = pc.if_else(
            pc.is_valid(rows["voice"]), pa.scalar(None, pa.string()), spec.voice.ref_text
        )
        text = pc.coalesce(text, fill)
    return rows.set_column(rows.schema.get_field_index("ref_text"), "ref_text", text)


def check_shared_voice(rows: pa.Table, model: TextModel, defaults: RowDefaults) -> None:
    """When every row takes the command-line voice, a bad --speaker/--language is a usage error."""
    per_row = any(rows[c].null_count < rows.num_rows for c in ("speaker", "language", "instruct"))
    if rows.num_rows and not per_row:
        try:
            model.normalize_row(defaults.speaker, defaults.language, defaults.instruct)
        except VoiceError as e:
            given = {
                "speaker": defaults.speaker,
                "language": None if defaults.language == "auto" else defaults.language,
            }
            at_fault = given.get(e.field) is not None
            where = f"given by --{e.field}" if at_fault else "set it with --speaker/--language"
            raise ManifestError(f"{e} ({where})") from None


def source_path(spec: JobSpec) -> str:
    return spec.source if spec.source == "-" else str(Path(spec.source).resolve())


def prepare_job(
    spec: JobSpec, open_text_model: OpenTextModel, env: Mapping[str, str]
) -> tuple[RunSetup, ShardRequest, GenerationOptions, RefDigests]:
    """Everything decided before the lock; writes nothing."""
    if spec.output.layout is not None:
        find(spec.output.layout)  # an unknown --output: a UsageError naming the choices
    out = spec.output.out_dir
    manifest = find_manifest(spec.source, out) if spec.kind == "batch" else None
    rows = apply_reference_defaults(read_rows(spec, manifest), spec)
    recorded = read_job_file(out, legacy_ok=spec.output.overwrite)
    check_input(spec, recorded, source_path(spec))
    if spec.output.layout is None or spec.output.audio_format is None:  # the out dir's own
        own = with_recorded_output(out, recorded)
        spec = replace(spec, output=settle_output(spec.output, own))
    req = shard_request(spec.scale_out.num_shards, spec.scale_out.shard_index, env)
    if spec.scale_out.backend == "ray" and req.from_environment:
        raise UsageError(
            f"--backend ray inside {req.source} ({req.count} tasks) would split the "
            "job silently: run Ray from one process, or pass --num-shards 1 to "
            "say this is intended"
        )
    shard = resolve_shard(out, req, recorded, overwrite=spec.output.overwrite)
    defaults = spec.voice.row_defaults
    if defaults.seed is None and seed_rule_for(recorded, overwrite=spec.output.overwrite) == "zero":
        # an out dir of a qtts from before: its rows without a seed were made with 0, and keep it
        spec = replace(spec, voice=replace(spec.voice, row_defaults=replace(defaults, seed=0)))
    if shard.sharded:
        spec = replace(
            spec, model=replace(spec.model, device=local_rank_device(spec.model.device, env))
        )
    model = open_text_model(spec.model.name)
    check_shared_voice(rows, model, spec.voice.row_defaults)
    if spec.voice.voice is not None:
        check_voice_flag(spec.voice.voice, model)
    try:
        options = generation_options(model.defaults, spec.sampling)
        budget = FrameBudget(
            model.defaults.max_new_tokens,
            spec.model.max_new_tokens,
            model.config.talker.max_position_embeddings,
        )
    except ValueError as e:
        raise ManifestError(str(e)) from None
    options = replace(options, max_attempts=spec.failures.attempts)
    if options.max_attempts > options.attempts:
        log.info(
            "--on-budget retry with greedy decoding: another seed gives the same codes, so "
            "a row that hits its frame budget fails at its first try"
        )
    spec = replace(spec, split=settle_segment_limit(spec.split, budget))
    spec = replace(spec, finish=spec.finish.at_model_rate(model.sample_rate))
    precision = settle_precision(
        model, spec.model.device, spec.model.dtype.value, recorded, overwrite=spec.output.overwrite
    )
    if spec.scale_out.backend == "ray" and spec.model.device.strip().lower() == "auto":
        precision = for_ray_actors(precision)  # each actor resolves auto on its own device
    elif precision.cpu_auto is not None:  # every later step (backends, plan) runs exactly this
        spec = replace(spec, model=replace(spec.model, dtype=Dtype(precision.dtype)))
    settings = job_fingerprint(
        model=model.identity,
        precision=str(precision),
        options=options,
        max_new_tokens=spec.model.max_new_tokens,
        audio_format=spec.output.audio_format.value,
        finish=spec.finish,
    )
    owned = shard.mask(rows["id"])
    own = rows if owned.all() else rows.filter(pa.array(owned))
    if shard.sharded and req.from_environment:  # said at WARNING: -q must not hide it
        log.warning(
            "%s: %d of %d rows, the other shards' rows left to the other tasks (pass "
            "--num-shards 1 when each task has an input of its own)",
            shard.describe(),
            own.num_rows,
            rows.num_rows,
        )
    elif shard.sharded:
        log.info("%s: %d of %d rows", shard.describe(), own.num_rows, rows.num_rows)
    ref_dir = manifest.base_dir if manifest is not None else None
    refs = RefDigests(out)
    prepared = prepare_rows(
        own,
        model,
        spec.voice.row_defaults,
        ref_dir=ref_dir,
        refs=refs,
        x_vector_only=spec.voice.x_vector_only,
    )
    pa.default_memory_pool().release_unused()
    for message, count in prepared.warnings.items():
        log.warning("%s (%d row%s)", message, count, "" if count == 1 else "s")
    if manifest is not None:
        inputs = manifest.inputs()
    else:
        inputs = [] if spec.source == "-" else [Path(spec.source)]
    setup = RunSetup(
        spec=spec,
        text_model=model,
        shard=shard,
        rows=_ids_of(rows),
        prepared=prepared,
        budget=budget,
        settings=settings,
        inputs=inputs,
        precision=precision,
        tries=options.attempts,
    )
    return setup, req, options, refs


def _ids_of(rows: pa.Table) -> pa.Table:
    """What results need of every input row: row, id, and the text of rows without an id."""
    if rows["id"].null_count == 0:
        text = pa.nulls(rows.num_rows, pa.large_string())  # no text held for a million rows
    else:
        text = pc.if_else(pc.is_null(rows["id"]), rows["text"], pa.scalar(None, pa.large_string()))
    return pa.table({"row": rows["row"], "id": rows["id"], "text": text})


def job_work(spec: JobSpec, open_text_model: OpenTextModel):
    """(RunSetup, Work, generation options): what a first run of this job into a fresh out dir
    would synthesize, decided as a run decides it (every row: no shards, nothing done before),
    with nothing written: the manifest bench's rows."""
    with tempfile.TemporaryDirectory(prefix="qtts-bench-") as tmp:
        out = Path(tmp) / "out"  # never created: the job's checks read a fresh out dir
        spec = replace(spec, output=replace(spec.output, out_dir=out, overwrite=False))
        setup, _, options, _ = prepare_job(spec, open_text_model, env={})
        spec = setup.spec
        work = setup.decide(empty(), list_out_dir(out), registry={})
    return setup, work, options


def run_job(
    spec: JobSpec,
    open_text_model: OpenTextModel,
    load_synthesizer: LoadSynthesizer,
    progress: ProgressSink | None = None,
    env: Mapping[str, str] = os.environ,
) -> JobSummary:
    """Run one job (one shard of it when sharded). Raises UsageError (exit 2) before anything is
    written, LockHeldError (75), FatalError (1); otherwise returns the summary."""
    called = time.monotonic()  # the summary's time split counts from here
    setup, req, options, refs = prepare_job(spec, open_text_model, env)
    spec = setup.spec
    if spec.output.dry_run:
        from qtts.core.jobs.execution.dry_run import dry_run, refuse_as_the_run_would

        refuse_as_the_run_would(setup)  # before any line: a refused run says one
        log_precision(setup.precision)
        return dry_run(setup)
    if spec.scale_out.backend == "ray":
        from qtts.core.jobs.execution.ray_backend import RayBackend

        backend = RayBackend.connect(spec, setup, options, open_text_model, load_synthesizer)
    else:
        backend = LocalBackend(
            out_dir=spec.output.out_dir,
            text_model=setup.text_model,
            load_synthesizer=with_segment_progress(load_synthesizer, progress),
            placement=spec.model.placement,
            options=options,
            budget=setup.budget,
            split=spec.split,
        )
    paths = StatePaths(spec.output.out_dir)
    make_out_dir(paths.dir)
    with OutDirLock(paths.lock(setup.shard.suffix)):
        write_job_files(setup, req, source_path(spec))
        log_precision(setup.precision)  # once the run goes ahead: a refused run says one line
        refs.save()
        return LockedRun(setup, backend, progress, called=called).execute()
