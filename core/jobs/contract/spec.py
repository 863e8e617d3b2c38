"""A job's options as the command line gave them, in the groups a user thinks in. Each group
checks its own values on construction, but for --output's name, which the output registry knows.
Standard library only at import: the CLI builds these while drawing `--help`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from qtts.core.errors import UsageError

# The options' choices: the other layers take them from here, the job layer's face for options.
from qtts.core.jobs.contract.choices import (
    DEFAULT_MODEL,
    DEFAULT_SHARD_ROWS,
    AudioFormat,
    BackendName,
    Choice,
    Dtype,
    OnBudget,
    Split,
)

if TYPE_CHECKING:
    from qtts.core.synthesis.requests import Placement


def _check(ok: bool, flag: str, bounds: str, got: object) -> None:
    """Unless ok, a UsageError naming the option, what it must be and the value given."""
    if not ok:
        raise UsageError(f"{flag} must be {bounds}, got {got}")


def _positive(flag: str, value: int | None) -> None:
    """A count option: not given (None), or at least 1."""
    _check(value is None or value >= 1, flag, ">= 1", value)


class JobKind(Choice):
    synth = "synth"  # text lines
    batch = "batch"  # a manifest: Parquet (a file or parts), JSON Lines, CSV/TSV


# The fields a manifest row may give (qtts.core.jobs.rows.manifest reads them under these names).
REQUIRED_FIELDS = ("id", "text")
OPTIONAL_FIELDS = ("speaker", "language", "instruct", "ref_audio", "ref_text", "seed", "voice")


@dataclass(frozen=True)
class ManifestColumns:
    """field -> its manifest column, where --id-column, --text-column or --column rename it."""

    renamed: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.renamed) - {*REQUIRED_FIELDS, *OPTIONAL_FIELDS})
        if unknown:
            raise UsageError(f"no manifest field {unknown[0]!r} to map a column onto")
        # Mapping a field onto its own name changes nothing: keep the record (job.json) short.
        same = {f: c for f, c in self.renamed.items() if f != c}
        object.__setattr__(self, "renamed", dict(sorted(same.items())))

    def column(self, name: str) -> str:
        """The manifest column that holds field `name`."""
        return self.renamed.get(name, name)

    def flag(self, name: str) -> str | None:
        """The option that mapped field `name` ("--text-column sentence"), or None."""
        if name not in self.renamed:
            return None
        if name in REQUIRED_FIELDS:
            return f"--{name}-column {self.renamed[name]}"
        return f"--column {name}={self.renamed[name]}"

    @classmethod
    def from_flags(
        cls, id_column: str | None, text_column: str | None, pairs: list[str] | None
    ) -> ManifestColumns:
        """--id-column, --text-column and each --column FIELD=NAME (None: not given)."""
        renamed = {"id": id_column, "text": text_column}
        for pair in pairs or []:
            name, sep, column = (s.strip() for s in pair.partition("="))
            if not sep or not name or not column:
                raise UsageError(f"--column {pair!r}: give FIELD=NAME, e.g. speaker=spk")
            if name not in OPTIONAL_FIELDS:
                which = f"use --{name}-column" if name in REQUIRED_FIELDS else "unknown field"
                raise UsageError(
                    f"--column {pair!r}: {which}; --column maps {', '.join(OPTIONAL_FIELDS)}"
                )
            if renamed.get(name) not in (None, column):
                raise UsageError(f"--column maps {name!r} twice ({renamed[name]}, {column})")
            renamed[name] = column
        return cls({f: c for f, c in renamed.items() if c is not None})


@dataclass(frozen=True)
class ModelOptions:
    """Which weights, on which device, in what precision, how many rows at once, for how long."""

    name: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: Dtype = Dtype.auto
    batch_size: int | None = None  # None: the memory plan decides (--batch-size auto)
    max_new_tokens: int | None = None  # None: from the text's length and the checkpoint

    def __post_init__(self) -> None:
        device_ok = re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device) is not None
        _check(device_ok, "--device", "auto, cpu, cuda or cuda:N", repr(self.device))
        object.__setattr__(self, "dtype", Dtype.parse(self.dtype, "--dtype"))
        _positive("--batch-size", self.batch_size)
        _positive("--max-new-tokens", self.max_new_tokens)

    @property
    def placement(self) -> Placement:
        from qtts.core.synthesis.requests import Placement  # numpy: not while drawing --help

        return Placement(device=self.device, dtype=self.dtype.value, batch_size=self.batch_size)


@dataclass(frozen=True)
class RowDefaults:
    """Command-line values a row takes where its own field is absent or null."""

    speaker: str | None = None
    language: str = "auto"
    instruct: str | None = None
    # None: the row's id's seed (rows/validation.py id_seed), or 0 where the out dir pins the
    # old rule
    seed: int | None = None


@dataclass(frozen=True)
class VoiceOptions:
    """The voice of rows that do not name their own, and how Base models clone one."""

    row_defaults: RowDefaults = RowDefaults()
    ref_audio: str | None = None  # Base: reference clip for rows without one
    ref_text: str | None = None  # Base: its transcript (in-context cloning); none: x-vector only
    x_vector_only: bool = False  # Base: ignore every ref_text (x-vector cloning)
    # Base: a voice file (qtts voice make) for rows with neither a voice nor a ref_audio
    voice: str | None = None

    def __post_init__(self) -> None:
        given = [
            f for f, v in (("--ref-audio", self.ref_audio), ("--ref-text", self.ref_text)) if v
        ]
        if self.voice is not None and given:
            raise UsageError(
                f"--voice with {' and '.join(given)}: a voice file holds its reference and its "
                "transcript; give one or the other"
            )


@dataclass(frozen=True)
class SamplingOverrides:
    """Command-line sampling values per site (talker, subtalker) by SamplingParams field."""

    talker: Mapping[str, float | int | bool] = field(default_factory=dict)
    subtalker: Mapping[str, float | int | bool] = field(default_factory=dict)

    def __post_init__(self) -> None:  # read-only, as a frozen dataclass's fields should be
        object.__setattr__(self, "talker", MappingProxyType(dict(self.talker)))
        object.__setattr__(self, "subtalker", MappingProxyType(dict(self.subtalker)))

    @classmethod
    def from_flags(
        cls, greedy: bool | None = None, **flags: float | int | None
    ) -> SamplingOverrides:
        """flags named after SamplingParams fields, `subtalker_` first for the code predictor's
        site (the command line's --top-k, --subtalker-top-k); None: not given. greedy True
        (--greedy) or False (--sample) sets do_sample at both sites; None keeps the checkpoint's."""
        given = {name: value for name, value in flags.items() if value is not None}
        if greedy is not None:
            given["do_sample"] = given[SUBTALKER + "do_sample"] = not greedy
        sub = {n.removeprefix(SUBTALKER): v for n, v in given.items() if n.startswith(SUBTALKER)}
        talker = {n: v for n, v in given.items() if not n.startswith(SUBTALKER)}
        return cls(talker=talker, subtalker=sub)


SUBTALKER = "subtalker_"


@dataclass(frozen=True)
class OutputOptions:
    """Where the files go, in what format, and what to do with a folder that holds a job."""

    out_dir: Path
    # --format and --output (files, or an archive format: the output registry's names); None:
    # not given, so the out dir's own. A run settles both before it reads a row.
    audio_format: AudioFormat | None = AudioFormat.wav
    save_codes: bool = False
    layout: str | None = "files"
    shard_rows: int = DEFAULT_SHARD_ROWS  # rows per archive shard
    shard_rows_given: bool = False  # --shard-rows on the command line (said if it does nothing)
    # "layout", "audio_format": taken from the out dir's job file (checked under the job lock)
    inherited: tuple[str, ...] = ()
    overwrite: bool = False  # redo every row
    input_moved: bool = False  # the out dir's recorded input moved here: adopt this path
    dry_run: bool = False  # plan and report; load no weights, write nothing

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        if self.audio_format is not None:
            fmt = AudioFormat.parse(self.audio_format, "--format")
            object.__setattr__(self, "audio_format", fmt)
        if self.layout is not None:  # a Choice prints as it is typed
            object.__setattr__(self, "layout", str(self.layout))
        _positive("--shard-rows", self.shard_rows)


# 50 text tokens take about 16 s at a typical 4 frames a token, 20 s at a slow 5: well inside the
# ~30 s past which long generations are reported to stop early or trail off.
DEFAULT_MAX_SEGMENT_TOKENS = 50
DEFAULT_SEGMENT_PAUSE_S = 0.25
MAX_SEGMENT_PAUSE_S = 10.0


@dataclass(frozen=True)
class SplitOptions:
    """How long rows are cut into segments, synthesized apart and joined with a pause."""

    mode: Split = Split.auto
    # None: not given; the job fits the default to the model (core/jobs/work/split_rules.py)
    max_segment_tokens: int | None = None
    pause_s: float = DEFAULT_SEGMENT_PAUSE_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Split.parse(self.mode, "--split"))
        _positive("--max-segment-tokens", self.max_segment_tokens)
        pause = f"in [0, {MAX_SEGMENT_PAUSE_S:g}] seconds"
        _check(
            0 <= self.pause_s <= MAX_SEGMENT_PAUSE_S, "--segment-pause", pause, f"{self.pause_s:g}"
        )

    @property
    def enabled(self) -> bool:
        return self.mode is not Split.none

    @property
    def limit(self) -> int:
        """Most text tokens in a segment: the one given, else the default."""
        given = self.max_segment_tokens
        return DEFAULT_MAX_SEGMENT_TOKENS if given is None else given

    @property
    def key(self) -> str:
        """What a split row's audio depends on, as its record keeps it: "auto/50/0.25"."""
        if not self.enabled:
            return Split.none.value
        return f"{self.mode.value}/{self.limit}/{_exact(self.pause_s)}"

    @classmethod
    def from_key(cls, key: str | None) -> SplitOptions:
        """The settings a record's key names; none for no key (an older record) or a bad one."""
        mode, _, rest = (key or "").partition("/")
        tokens, _, pause = rest.partition("/")
        try:
            return cls(Split(mode), int(tokens), float(pause)) if rest else cls(Split(mode))
        except (ValueError, UsageError):
            return cls(Split.none)


def _exact(x: float) -> str:
    """x short ("0.25") where that reads back exactly, else in full: keys differ when values do."""
    short = f"{x:g}"
    return short if float(short) == x else repr(x)


# The finishing steps' bounds and defaults (README, "Audio for training").
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8_000, 48_000  # every rate a speech trainer reads
MIN_LOUDNESS_LUFS, MAX_LOUDNESS_LUFS = -70.0, 0.0  # -70: BS.1770's absolute gate
DEFAULT_PEAK_DB = -1.0  # the sample-peak ceiling of --loudness, dBFS
MIN_PEAK_DB = -60.0
# Silence: 40 dB under the clip's loudest 10 ms, relative so a quiet clip trims as a loud one, and
# deep enough that a soft consonant or a word's fading tail is speech.
DEFAULT_TRIM_THRESHOLD_DB = -40.0
MIN_TRIM_THRESHOLD_DB = -100.0
# Silence kept at each end: no clip starts or stops on a spoken sample; alignment finds the edges.
DEFAULT_TRIM_PAD_S = 0.1
MAX_TRIM_PAD_S = 10.0


@dataclass(frozen=True)
class FinishOptions:
    """What each clip goes through between the speech decoder and its encoding, in this order:
    trimmed, resampled, normalized (qtts.core.jobs.output.finishing). The defaults do nothing."""

    sample_rate: int | None = None  # None: the model's own (24 kHz)
    loudness_lufs: float | None = None  # None: not normalized
    peak_db: float = DEFAULT_PEAK_DB  # the ceiling normalization never crosses
    trim_silence: bool = False
    trim_threshold_db: float = DEFAULT_TRIM_THRESHOLD_DB  # re the clip's loudest 10 ms
    trim_pad_s: float = DEFAULT_TRIM_PAD_S

    def __post_init__(self) -> None:
        rate, lufs = self.sample_rate, self.loudness_lufs
        rate_ok = rate is None or MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE
        _check(rate_ok, "--sample-rate", f"in [{MIN_SAMPLE_RATE}, {MAX_SAMPLE_RATE}] Hz", rate)
        lufs_ok = lufs is None or MIN_LOUDNESS_LUFS < lufs <= MAX_LOUDNESS_LUFS
        lufs_range = f"in ({MIN_LOUDNESS_LUFS:g}, {MAX_LOUDNESS_LUFS:g}] LUFS"
        _check(lufs_ok, "--loudness", lufs_range, lufs if lufs is None else f"{lufs:g}")
        peak, threshold, pad = self.peak_db, self.trim_threshold_db, self.trim_pad_s
        _check(MIN_PEAK_DB <= peak <= 0, "--peak-db", f"in [{MIN_PEAK_DB:g}, 0] dBFS", f"{peak:g}")
        threshold_ok = MIN_TRIM_THRESHOLD_DB <= threshold < 0
        threshold_range = f"in [{MIN_TRIM_THRESHOLD_DB:g}, 0) dB"
        _check(threshold_ok, "--trim-threshold", threshold_range, f"{threshold:g}")
        pad_range = f"in [0, {MAX_TRIM_PAD_S:g}] seconds"
        _check(0 <= pad <= MAX_TRIM_PAD_S, "--trim-pad", pad_range, f"{pad:g}")

    @property
    def acts(self) -> bool:
        """Whether any step changes the audio (else it is written as the decoder made it)."""
        return bool(self.fingerprint_part())

    def at_model_rate(self, model_rate: int) -> FinishOptions:
        """These options for a model whose audio comes at `model_rate`: --sample-rate at that
        rate resamples nothing, so it is no setting (an out dir made without it keeps its rows)."""
        return replace(self, sample_rate=None) if self.sample_rate == model_rate else self

    def fingerprint_part(self) -> dict[str, Any]:
        """What the acting steps add to a row's fingerprint ({} if none acts: old digests hold)."""
        part: dict[str, Any] = {}
        if self.trim_silence:
            part["trim_silence"] = {
                "threshold_db": self.trim_threshold_db,
                "pad_s": self.trim_pad_s,
            }
        if self.sample_rate is not None:
            part["sample_rate"] = self.sample_rate
        if self.loudness_lufs is not None:
            part["loudness"] = {"lufs": self.loudness_lufs, "peak_db": self.peak_db}
        return part


# Tries per row under --on-budget retry: a row that runs away on a share q of draws does on all 3
# on q^3 of them (10% -> 0.1%), and a row's work stays bounded at 3 frame budgets.
DEFAULT_MAX_ATTEMPTS = 3


def default_on_budget(kind: JobKind, max_new_tokens: int | None) -> OnBudget:
    """retry for qtts batch under the automatic budget (a runaway guard), else ok."""
    return OnBudget.retry if kind is JobKind.batch and max_new_tokens is None else OnBudget.ok


@dataclass(frozen=True)
class FailurePolicy:
    """When a row counts as failed, and how many failures stop the job."""

    max_failures: int | None = None  # stop after this many failed rows; 1 = --fail-fast
    # A row that hits its frame budget: ok (flagged), fail, or retry (then fail); None: the
    # job's default (default_on_budget).
    on_budget: OnBudget | None = None
    max_attempts: int | None = None  # tries under retry; None: DEFAULT_MAX_ATTEMPTS

    def __post_init__(self) -> None:
        _positive("--max-failures", self.max_failures)
        if self.on_budget is not None:
            object.__setattr__(self, "on_budget", OnBudget.parse(self.on_budget, "--on-budget"))
        _positive("--max-attempts", self.max_attempts)

    def resolved(self, default: OnBudget) -> FailurePolicy:
        """This policy with --on-budget set: unset, retry with --max-attempts, else `default`."""
        on_budget = self.on_budget
        if on_budget is None:
            on_budget = default if self.max_attempts is None else OnBudget.retry
        if self.max_attempts is not None and on_budget is not OnBudget.retry:
            raise UsageError(f"--max-attempts applies to --on-budget retry, not {on_budget}")
        return replace(self, on_budget=on_budget)

    @property
    def attempts(self) -> int:
        """Tries a row that hits its frame budget gets (1: no retry)."""
        if self.on_budget is not OnBudget.retry:
            return 1
        return DEFAULT_MAX_ATTEMPTS if self.max_attempts is None else self.max_attempts

    @property
    def key(self) -> str:
        """What a row's kept codes depend on, as its record keeps it: ok, fail or retry/N."""
        if self.on_budget is OnBudget.retry:
            return f"{OnBudget.retry.value}/{self.attempts}"
        return str(self.on_budget or OnBudget.ok)


@dataclass(frozen=True)
class RayOptions:
    """The cluster a `--backend ray` job joins and the actors it starts there."""

    address: str | None = None  # None: RAY_ADDRESS, else a local Ray for this job
    workers: int | None = None  # actors; None: one per GPU, or 1 without GPUs
    gpus_per_worker: float | None = None
    timeout: float = 30.0  # seconds to reach the cluster before giving up

    def __post_init__(self) -> None:
        gpus = self.gpus_per_worker
        _positive("--workers", self.workers)
        _check(gpus is None or gpus >= 0, "--gpus-per-worker", ">= 0", gpus)
        _check(self.timeout > 0, "--ray-timeout", "> 0 seconds", self.timeout)


@dataclass(frozen=True)
class ScaleOut:
    """How one job spreads: shards of one out dir (Slurm/cron arrays) or a Ray cluster."""

    num_shards: int | None = None  # with shard_index: rows with sha1(id) % N == I only
    shard_index: int | None = None
    backend: BackendName = BackendName.local
    ray: RayOptions = RayOptions()

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", BackendName.parse(self.backend, "--backend"))
        if self.backend is BackendName.ray and (self.num_shards or 1) > 1:
            raise UsageError("--backend ray spreads one job over the cluster: no --num-shards")


@dataclass(frozen=True)
class JobSpec:
    kind: JobKind
    source: str  # path, or "-" for stdin (synth)
    output: OutputOptions
    model: ModelOptions = ModelOptions()
    voice: VoiceOptions = VoiceOptions()
    sampling: SamplingOverrides = field(default_factory=SamplingOverrides)
    failures: FailurePolicy = FailurePolicy()
    scale_out: ScaleOut = ScaleOut()
    split: SplitOptions = SplitOptions()
    finish: FinishOptions = FinishOptions()  # the clip between the decoder and its encoding
    columns: ManifestColumns = field(default_factory=ManifestColumns)  # batch: source's names

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", JobKind.parse(self.kind, "job kind"))
        default = default_on_budget(self.kind, self.model.max_new_tokens)
        object.__setattr__(self, "failures", self.failures.resolved(default))
