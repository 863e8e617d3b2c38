"""Shared command-line options as Annotated aliases, so synth and batch spell them once, grouped
into the help panels a user scans: input and resume, voice, sampling, output, audio for training,
long text, engine, scale out, logging. Help text is Rich markup: a literal "[" is written "\\[".

Defaults for sampling are None: None keeps the checkpoint's generation_config.json value.
The choices come from qtts.core.jobs.contract.choices, --output's from the output registry (standard
library only, both: `qtts --help` stays fast).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated

import typer

from qtts.core.jobs.contract.spec import (
    DEFAULT_PEAK_DB,
    DEFAULT_SHARD_ROWS,
    DEFAULT_TRIM_PAD_S,
    DEFAULT_TRIM_THRESHOLD_DB,
    AudioFormat,
    BackendName,
    Dtype,
    OnBudget,
    Split,
)
from qtts.core.jobs.output.stores.registry import OutputLayout, formats, layouts_help

INPUT_PANEL = "Input and resume"
VOICE_PANEL = "Voice"
SAMPLING_PANEL = "Sampling (unset: the checkpoint's generation_config.json)"
OUTPUT_PANEL = "Output"
FINISH_PANEL = "Audio for training (unset: the model's 24 kHz audio as it comes)"
LONG_TEXT_PANEL = "Long text"
ENGINE_PANEL = "Model and engine"
SCALE_PANEL = "Scale out"
LOG_PANEL = "Failures and logging"


def _opt(*names: str, panel: str, **kw):
    return typer.Option(*names, rich_help_panel=panel, **kw)


def parse_batch_size(value: str) -> int | None:
    """ "auto" (None: the memory plan decides) or a positive integer."""
    if value.strip().lower() == "auto":
        return None
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise typer.BadParameter(f"--batch-size {value!r}: use auto or a positive integer")
    return size


# -- input and resume ------------------------------------------------------------
Overwrite = Annotated[
    bool,
    _opt(
        "--overwrite",
        panel=INPUT_PANEL,
        help=(
            "Redo every row. Default: resume, skipping rows already done with the same "
            "fingerprint (text, voice, seed, model, sampling, format)."
        ),
    ),
]
InputMoved = Annotated[
    bool,
    _opt(
        "--input-moved",
        panel=INPUT_PANEL,
        help=(
            "The out dir's input was moved or renamed to INPUT: adopt the new path and resume "
            "(another input is refused otherwise)."
        ),
    ),
]
DryRun = Annotated[
    bool,
    _opt(
        "--dry-run",
        panel=INPUT_PANEL,
        help=(
            "Read and validate every row, scan what is done, plan memory, and print what would "
            "run (one JSON line); load no weights, write nothing."
        ),
    ),
]
IdColumn = Annotated[
    str | None,
    _opt(
        "--id-column",
        metavar="NAME",
        panel=INPUT_PANEL,
        help="The manifest column that holds the ids (default: id), e.g. utt_id.",
    ),
]
TextColumn = Annotated[
    str | None,
    _opt(
        "--text-column",
        metavar="NAME",
        panel=INPUT_PANEL,
        help="The manifest column that holds the text (default: text), e.g. sentence.",
    ),
]
ColumnMap = Annotated[
    list[str] | None,
    _opt(
        "--column",
        metavar="FIELD=NAME",
        panel=INPUT_PANEL,
        help=(
            "Read an optional field (speaker, language, instruct, ref_audio, ref_text, seed, "
            "voice) from column NAME, e.g. speaker=spk. Repeatable."
        ),
    ),
]

# -- voice -----------------------------------------------------------------------
Speaker = Annotated[
    str | None,
    _opt(
        "--speaker",
        panel=VOICE_PANEL,
        help=(
            "Speaker of CustomVoice models, for rows without their own (qtts info MODEL lists "
            "them)."
        ),
    ),
]
Language = Annotated[
    str,
    _opt(
        "--language",
        panel=VOICE_PANEL,
        help=(
            "Language (english, or its ISO 639-1 tag: en), or auto (detected from the text), "
            "for rows without their own."
        ),
    ),
]
Instruct = Annotated[
    str | None,
    _opt(
        "--instruct",
        panel=VOICE_PANEL,
        help=("Style instruction (1.7B CustomVoice, VoiceDesign), for rows without their own."),
    ),
]
RefAudio = Annotated[
    Path | None,
    _opt(
        "--ref-audio",
        panel=VOICE_PANEL,
        help=("Base models: the clip whose voice rows without their own ref_audio clone."),
    ),
]
RefText = Annotated[
    str | None,
    _opt(
        "--ref-text",
        panel=VOICE_PANEL,
        help=("Transcript of --ref-audio: in-context cloning. Without it: x-vector only."),
    ),
]
VoiceFile = Annotated[
    Path | None,
    _opt(
        "--voice",
        metavar="FILE",
        panel=VOICE_PANEL,
        help=(
            "Base models: a voice file (qtts voice make, qtts voice design) for rows with "
            "neither a voice nor a ref_audio of their own; not with --ref-audio/--ref-text."
        ),
    ),
]
XVectorOnly = Annotated[
    bool,
    _opt(
        "--x-vector-only",
        panel=VOICE_PANEL,
        help=(
            "Clone from the speaker embedding alone, ignoring every ref_text (and a voice "
            "file's transcript and codes)."
        ),
    ),
]
Seed = Annotated[
    int | None,
    _opt(
        "--seed",
        min=0,
        metavar="N",
        panel=VOICE_PANEL,
        help=(
            "Seed of rows without their own seed column value (default: one derived from the "
            "row's id, so rows of the same text and voice differ)."
        ),
    ),
]

# -- sampling --------------------------------------------------------------------
Greedy = Annotated[
    bool | None,
    _opt(
        "--greedy/--sample",
        panel=SAMPLING_PANEL,
        show_default=False,
        help=(
            "Argmax (the repetition penalty still applies) or sampling, at both sites, "
            "whatever generation_config.json says."
        ),
    ),
]


def sampling_flags() -> list[inspect.Parameter]:
    """The per-site sampling flags (--temperature, --subtalker-top-k, ...), made from the fields of
    SamplingParams (core/model/config.py): a field with a generation_config.json key at a site is a
    flag there, named after it (`subtalker-` first for the code predictor's), its help the field's
    own. do_sample is --greedy/--sample above. Unset (None): the checkpoint's value."""
    from dataclasses import fields

    from qtts.core.model.config import SamplingParams

    flags = []
    for site, (prefix, who) in enumerate((("", "Talker"), ("subtalker_", "Code predictor"))):
        for f in fields(SamplingParams):
            if f.name == "do_sample" or f.metadata["keys"][site] is None:
                continue
            name = prefix + f.name
            option = _opt("--" + name.replace("_", "-"), panel=SAMPLING_PANEL,
                          help=f"{who} {f.metadata['help']}.")  # fmt: skip
            kind = type(f.default) | None
            flags.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                           annotation=Annotated[kind, option]))  # fmt: skip
    return flags


# -- output ----------------------------------------------------------------------
OutDir = Annotated[
    Path,
    _opt(
        "--out-dir",
        "-o",
        panel=OUTPUT_PANEL,
        help=("Folder for audio files, results.parquet and metadata.jsonl."),
    ),
]
Format = Annotated[
    AudioFormat | None,
    _opt(
        "--format",
        "-f",
        panel=OUTPUT_PANEL,
        help=(
            "Audio file format (16-bit PCM). Default: the out dir's own (wav for a new one); "
            "another repacks its finished rows."
        ),
    ),
]
SaveCodes = Annotated[
    bool,
    _opt(
        "--save-codes",
        panel=OUTPUT_PANEL,
        help=(
            "Also keep each row's int64 \\[frames, 16] codec codes: OUT/{id}.codes.npy, or a "
            "member or column of its archive shard."
        ),
    ),
]
OutputOpt = Annotated[
    OutputLayout | None,
    _opt(
        "--output",
        panel=OUTPUT_PANEL,
        # files and each archive format, from the output registry
        help=layouts_help() + " Default: the out dir's own (files for a new one).",
    ),
]
SHARDED = [name for name, fmt in formats().items() if fmt.shards]  # the archive layouts
ShardRows = Annotated[
    int | None,
    _opt(
        "--shard-rows",
        min=1,
        metavar="N",
        panel=OUTPUT_PANEL,
        help=(
            f"Rows per archive shard (--output {'|'.join(SHARDED)}; default {DEFAULT_SHARD_ROWS})."
        ),
    ),
]

# -- audio for training ----------------------------------------------------------
SampleRate = Annotated[
    int | None,
    _opt(
        "--sample-rate",
        metavar="HZ",
        panel=FINISH_PANEL,
        help="Write the audio at this rate, 8000 to 48000 (resampled with soxr), e.g. 16000.",
    ),
]
Loudness = Annotated[
    float | None,
    _opt(
        "--loudness",
        metavar="LUFS",
        panel=FINISH_PANEL,
        help=(
            "Normalize each clip to this integrated loudness (ITU-R BS.1770-4), e.g. -23; "
            "results' loudness_status says where --peak-db held it back."
        ),
    ),
]
PeakDb = Annotated[
    float | None,
    _opt(
        "--peak-db",
        metavar="DBFS",
        panel=FINISH_PANEL,
        show_default=False,
        help=f"The sample peak --loudness never crosses (default {DEFAULT_PEAK_DB:g}).",
    ),
]
TrimSilence = Annotated[
    bool,
    _opt(
        "--trim-silence",
        panel=FINISH_PANEL,
        help="Cut each clip's leading and trailing silence to --trim-pad (after joining a "
        "long row's segments).",
    ),
]
TrimThreshold = Annotated[
    float | None,
    _opt(
        "--trim-threshold",
        metavar="DB",
        panel=FINISH_PANEL,
        show_default=False,
        help=(
            "With --trim-silence: silence is quieter than the clip's loudest 10 ms by more than "
            f"this (default {DEFAULT_TRIM_THRESHOLD_DB:g})."
        ),
    ),
]
TrimPad = Annotated[
    float | None,
    _opt(
        "--trim-pad",
        metavar="SECONDS",
        panel=FINISH_PANEL,
        show_default=False,
        help=f"With --trim-silence: silence kept at each end (default {DEFAULT_TRIM_PAD_S:g}).",
    ),
]

# -- long text -------------------------------------------------------------------
SplitOpt = Annotated[
    Split,
    _opt(
        "--split",
        panel=LONG_TEXT_PANEL,
        help=(
            "Cut long rows into segments, synthesized apart and joined into the row's one file. "
            "auto: rows over --max-segment-tokens, at sentence ends (then clauses, then words); "
            "sentence: every row at every sentence end; none: every row whole."
        ),
    ),
]
MaxSegmentTokens = Annotated[
    int | None,
    _opt(
        "--max-segment-tokens",
        min=1,
        metavar="N",
        panel=LONG_TEXT_PANEL,
        help=(
            "Most text tokens in a segment. Unset: 50 (about 16 s of speech, well inside the "
            "length the model says reliably), or less where the model's frame budget is smaller."
        ),
    ),
]
SegmentPause = Annotated[
    float,
    _opt(
        "--segment-pause",
        min=0.0,
        metavar="SECONDS",
        panel=LONG_TEXT_PANEL,
        help="Seconds of silence between a row's segments.",
    ),
]

# -- model and engine ------------------------------------------------------------
Model = Annotated[
    str,
    _opt(
        "--model",
        "-m",
        metavar="MODEL",
        panel=ENGINE_PANEL,
        help="Local checkpoint dir or Hugging Face repo id.",
    ),
]
Device = Annotated[
    str,
    _opt(
        "--device",
        metavar="DEVICE",
        panel=ENGINE_PANEL,
        help=("auto, cpu, cuda or cuda:N (auto: cuda when there is one)."),
    ),
]
DtypeOpt = Annotated[
    Dtype,
    _opt(
        "--dtype",
        metavar="DTYPE",
        panel=ENGINE_PANEL,
        help=(
            "auto, float32, bfloat16 or float16. auto: bfloat16 on CUDA; on a CPU bfloat16 "
            "where it has native bf16 (AMX or AVX512-BF16), else float32 (a job's out dir keeps "
            "what its first run picked)."
        ),
    ),
]
BatchSize = Annotated[
    str,
    _opt(
        "--batch-size",
        "-b",
        metavar="auto|N",
        panel=ENGINE_PANEL,
        help=(
            "Rows decoded together (engine slots, refilled as rows finish). auto: as many as the "
            "memory plan fits (see qtts plan); a number that cannot fit is refused."
        ),
    ),
]
MaxNewTokens = Annotated[
    int | None,
    _opt(
        "--max-new-tokens",
        min=1,
        metavar="N",
        panel=ENGINE_PANEL,
        help=(
            "Talker steps per row, used exactly (a row that never stops gets N-1 frames at "
            "12.5 Hz). Unset: min(generation_config max_new_tokens, 100 + 8 x text tokens)."
        ),
    ),
]

# -- scale out -------------------------------------------------------------------
NumShards = Annotated[
    int | None,
    _opt(
        "--num-shards",
        min=1,
        metavar="N",
        panel=SCALE_PANEL,
        help=(
            "Split the job into N shards by sha1(id) % N. Unset: from a Slurm array, srun or "
            "torchrun environment, else 1. The out dir pins N."
        ),
    ),
]
ShardIndex = Annotated[
    int | None,
    _opt("--shard-index", min=0, metavar="I", panel=SCALE_PANEL, help="This run's shard, 0..N-1."),
]
BackendOpt = Annotated[
    BackendName,
    _opt(
        "--backend",
        panel=SCALE_PANEL,
        help=(
            "local: this process and device. ray: Ray Data actors over a cluster's GPUs (pip "
            "install 'qtts\\[ray]'); outputs go to a folder every worker can see."
        ),
    ),
]
RayAddress = Annotated[
    str | None,
    _opt(
        "--ray-address",
        metavar="ADDRESS",
        panel=SCALE_PANEL,
        help=("Ray cluster to join. Unset: RAY_ADDRESS, else a local Ray for this job."),
    ),
]
Workers = Annotated[
    int | None,
    _opt(
        "--workers",
        min=1,
        metavar="N",
        panel=SCALE_PANEL,
        help=("Ray actors. Unset: one per GPU in the cluster, or 1 without GPUs."),
    ),
]
GpusPerWorker = Annotated[
    float | None,
    _opt(
        "--gpus-per-worker",
        min=0,
        panel=SCALE_PANEL,
        help=("GPUs per Ray actor. Unset: 1 when the cluster has GPUs, else 0."),
    ),
]
RayTimeout = Annotated[
    float,
    _opt(
        "--ray-timeout",
        min=0.1,
        metavar="SECONDS",
        panel=SCALE_PANEL,
        help=("Seconds to reach --ray-address before giving up (nothing is written)."),
    ),
]

# -- failures and logging --------------------------------------------------------
FailFast = Annotated[
    bool,
    _opt("--fail-fast/--no-fail-fast", panel=LOG_PANEL, help=("Stop at the first failed row.")),
]
MaxFailures = Annotated[
    int | None,
    _opt(
        "--max-failures",
        min=1,
        metavar="N",
        panel=LOG_PANEL,
        help=("Stop after N failed rows (exit 3). Unset: never stop for failures."),
    ),
]
OnBudgetOpt = Annotated[
    OnBudget | None,
    _opt(
        "--on-budget",
        panel=LOG_PANEL,
        show_default=False,
        help=(
            "A row that uses its whole frame budget without EOS: ok (kept, flagged "
            "hit_frame_budget in results), fail, or retry (synthesized again with a seed derived "
            "from its own, up to --max-attempts tries, then failed). Default: retry for qtts "
            "batch under the automatic frame budget (no --max-new-tokens), else ok."
        ),
    ),
]
MaxAttempts = Annotated[
    int | None,
    _opt(
        "--max-attempts",
        min=1,
        metavar="N",
        panel=LOG_PANEL,
        show_default=False,
        help="Tries per row with --on-budget retry (default 3; given alone, it means retry).",
    ),
]
LogInterval = Annotated[
    float,
    _opt(
        "--log-interval",
        min=1.0,
        metavar="SECONDS",
        panel=LOG_PANEL,
        help=("Seconds between progress log lines when stderr is not a terminal."),
    ),
]
Quiet = Annotated[bool, _opt("--quiet", "-q", panel=LOG_PANEL, help="Warnings and errors only.")]
Verbose = Annotated[bool, _opt("--verbose", "-v", panel=LOG_PANEL, help="Debug logging.")]
