"""The job commands' options, declared once and shared by `synth` and `batch`.

Each builder's signature is a group of options (the Annotated aliases of qtts.cli.options), and its
body turns them into the typed option group of qtts.core.jobs.contract.spec. `job_command` gives
a command every group's options and calls it with the groups built into one JobOptions, so a value
goes from the command line to the JobSpec field that holds it without passing through a dict.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from qtts.cli import options as o
from qtts.cli.errors import cli_errors
from qtts.cli.logs import setup_logging
from qtts.core.errors import UsageError
from qtts.core.jobs.contract.spec import (
    DEFAULT_MODEL,
    DEFAULT_PEAK_DB,
    DEFAULT_SEGMENT_PAUSE_S,
    DEFAULT_SHARD_ROWS,
    DEFAULT_TRIM_PAD_S,
    DEFAULT_TRIM_THRESHOLD_DB,
    BackendName,
    Dtype,
    FailurePolicy,
    FinishOptions,
    JobKind,
    JobSpec,
    ManifestColumns,
    ModelOptions,
    OutputOptions,
    RayOptions,
    RowDefaults,
    SamplingOverrides,
    ScaleOut,
    Split,
    SplitOptions,
    VoiceOptions,
)

log = logging.getLogger("qtts")


@dataclass(frozen=True)
class Reporting:
    """How the run talks on stderr (not part of the job: changing it never redoes a row)."""

    log_interval: float = 30.0
    quiet: bool = False
    verbose: bool = False


def model_options(
    model: o.Model = DEFAULT_MODEL,
    device: o.Device = "auto",
    dtype: o.DtypeOpt = Dtype.auto,
    batch_size: o.BatchSize = "auto",
    max_new_tokens: o.MaxNewTokens = None,
) -> ModelOptions:
    return ModelOptions(model, device, dtype, o.parse_batch_size(batch_size), max_new_tokens)


def voice_options(
    speaker: o.Speaker = None,
    language: o.Language = "auto",
    instruct: o.Instruct = None,
    ref_audio: o.RefAudio = None,
    ref_text: o.RefText = None,
    voice: o.VoiceFile = None,
    x_vector_only: o.XVectorOnly = False,
    seed: o.Seed = None,
) -> VoiceOptions:
    audio = None if ref_audio is None else str(ref_audio)
    return VoiceOptions(
        RowDefaults(speaker, language, instruct, seed),
        audio,
        ref_text,
        x_vector_only,
        voice=None if voice is None else str(voice),
    )


def sampling_options(greedy: o.Greedy = None, **flags: float | int | None) -> SamplingOverrides:
    """greedy None: each site samples as generation_config.json says. `flags`: the per-site
    sampling flags, one per SamplingParams field and site (o.sampling_flags: the signature below).
    A drawing flag given to a site that does not sample is warned of once the checkpoint is
    known (generation.py)."""
    return SamplingOverrides.from_flags(greedy=greedy, **flags)


sampling_options.__signature__ = inspect.Signature(  # what job_command gives Typer
    [
        inspect.Parameter(
            "greedy", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=o.Greedy
        ),  # fmt: skip
        *o.sampling_flags(),
    ],
    return_annotation=SamplingOverrides,
)


def output_options(
    out_dir: o.OutDir = Path("out"),
    format: o.Format = None,
    save_codes: o.SaveCodes = False,
    output: o.OutputOpt = None,
    shard_rows: o.ShardRows = None,
    overwrite: o.Overwrite = False,
    input_moved: o.InputMoved = False,
    dry_run: o.DryRun = False,
) -> OutputOptions:
    return OutputOptions(
        out_dir=out_dir,
        audio_format=format,
        save_codes=save_codes,
        layout=output,
        shard_rows=DEFAULT_SHARD_ROWS if shard_rows is None else shard_rows,
        shard_rows_given=shard_rows is not None,
        overwrite=overwrite,
        input_moved=input_moved,
        dry_run=dry_run,
    )


def finish_options(
    sample_rate: o.SampleRate = None,
    loudness: o.Loudness = None,
    peak_db: o.PeakDb = None,
    trim_silence: o.TrimSilence = False,
    trim_threshold: o.TrimThreshold = None,
    trim_pad: o.TrimPad = None,
) -> FinishOptions:
    """A step's own settings given without the step are refused: they would do nothing."""
    if peak_db is not None and loudness is None:
        raise UsageError("--peak-db is the ceiling of --loudness: give --loudness LUFS too")
    for flag, value in (("--trim-threshold", trim_threshold), ("--trim-pad", trim_pad)):
        if value is not None and not trim_silence:
            raise UsageError(f"{flag} applies to --trim-silence: give --trim-silence too")
    return FinishOptions(
        sample_rate=sample_rate,
        loudness_lufs=loudness,
        peak_db=DEFAULT_PEAK_DB if peak_db is None else peak_db,
        trim_silence=trim_silence,
        trim_threshold_db=DEFAULT_TRIM_THRESHOLD_DB if trim_threshold is None else trim_threshold,
        trim_pad_s=DEFAULT_TRIM_PAD_S if trim_pad is None else trim_pad,
    )


def split_options(
    split: o.SplitOpt = Split.auto,
    max_segment_tokens: o.MaxSegmentTokens = None,
    segment_pause: o.SegmentPause = DEFAULT_SEGMENT_PAUSE_S,
) -> SplitOptions:
    if split == Split.none and max_segment_tokens is not None:
        raise UsageError("--max-segment-tokens cuts long rows; --split none cuts none")
    return SplitOptions(split, max_segment_tokens, segment_pause)


def shard_options(num_shards: o.NumShards = None, shard_index: o.ShardIndex = None) -> ScaleOut:
    return ScaleOut(num_shards, shard_index)


def scale_out_options(
    num_shards: o.NumShards = None,
    shard_index: o.ShardIndex = None,
    backend: o.BackendOpt = BackendName.local,
    ray_address: o.RayAddress = None,
    workers: o.Workers = None,
    gpus_per_worker: o.GpusPerWorker = None,
    ray_timeout: o.RayTimeout = 30.0,
) -> ScaleOut:
    ray = RayOptions(ray_address, workers, gpus_per_worker, ray_timeout)
    return replace(shard_options(num_shards, shard_index), backend=backend, ray=ray)


def failure_options(
    fail_fast: o.FailFast = False,
    max_failures: o.MaxFailures = None,
    on_budget: o.OnBudgetOpt = None,
    max_attempts: o.MaxAttempts = None,
) -> FailurePolicy:
    """on_budget None: the command's default (core/jobs/contract/spec.py, default_on_budget)."""
    limits = [n for n in (1 if fail_fast else None, max_failures) if n is not None]
    return FailurePolicy(min(limits) if limits else None, on_budget, max_attempts)


def column_options(
    id_column: o.IdColumn = None, text_column: o.TextColumn = None, column: o.ColumnMap = None
) -> ManifestColumns:
    """qtts batch: which manifest column holds each field named otherwise."""
    return ManifestColumns.from_flags(id_column, text_column, column)


def report_options(
    log_interval: o.LogInterval = 30.0, quiet: o.Quiet = False, verbose: o.Verbose = False
) -> Reporting:
    return Reporting(log_interval, quiet, verbose)


@dataclass(frozen=True)
class JobOptions:
    """Every group of a job command's options, built and checked."""

    model: ModelOptions
    voice: VoiceOptions
    sampling: SamplingOverrides
    output: OutputOptions
    finish: FinishOptions
    split: SplitOptions
    failures: FailurePolicy
    report: Reporting
    scale_out: ScaleOut
    columns: ManifestColumns = ManifestColumns()  # qtts batch only: its manifest's names

    def spec(self, kind: JobKind, source: str) -> JobSpec:
        return JobSpec(
            kind=kind,
            source=source,
            output=self.output,
            model=self.model,
            voice=self.voice,
            sampling=self.sampling,
            failures=self.failures,
            scale_out=self.scale_out,
            split=self.split,
            finish=self.finish,
            columns=self.columns,
        )


# JobOptions field -> the builder of its options, in the order the help panels show them.
GROUPS: dict[str, Callable] = {
    "model": model_options,
    "voice": voice_options,
    "sampling": sampling_options,
    "output": output_options,
    "finish": finish_options,
    "split": split_options,
    "failures": failure_options,
    "report": report_options,
}


def job_command(scale_out: Callable = shard_options, columns: Callable | None = None) -> Callable:
    """Decorate `command(<its arguments>, options: JobOptions)`: Typer sees the command's own
    arguments, then every group's options (`scale_out` builds the scale-out group: shards only,
    or shards and Ray; `columns`, when given, the manifest's column names); the command receives
    them built (a bad value is a one-line usage error, as from the parser). The reporting group
    is built first and sets up the log, so a builder's warning reads as every other log line."""
    groups = {**GROUPS, "scale_out": scale_out, **({"columns": columns} if columns else {})}

    def decorate(body: Callable) -> Callable:
        own = [p for p in _parameters(body) if p.name != "options"]
        per_group = {name: _parameters(build) for name, build in groups.items()}
        every = own + [p for params in per_group.values() for p in params]

        @functools.wraps(body)
        def command(**values):
            def build(name: str):
                return groups[name](**{p.name: values.pop(p.name) for p in per_group[name]})

            with cli_errors():
                report = build("report")  # first: what the other groups log has its format
                setup_logging(report.quiet, report.verbose)
                built = {name: build(name) for name in per_group if name != "report"}
                built["report"] = report
            return body(**values, options=JobOptions(**built))

        command.__signature__ = inspect.Signature(every)  # what Typer reads
        command.__annotations__ = {p.name: p.annotation for p in every}
        return command

    return decorate


def _parameters(fn: Callable) -> list[inspect.Parameter]:
    """fn's parameters as keyword-only (Typer passes every value by name), annotations resolved."""
    params = inspect.signature(fn, eval_str=True).parameters.values()
    return [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
