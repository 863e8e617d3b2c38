"""Shared command-line options as Annotated aliases, so synth and batch spell them once.

Defaults for sampling are None: None keeps the checkpoint's generation_config.json value.
No core imports here (qtts --help must not import torch).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"  # = qtts.core.jobs.run.DEFAULT_MODEL

MODEL_PANEL = "Model and device"
VOICE_PANEL = "Voice"
SAMPLING_PANEL = "Sampling (defaults: the checkpoint's generation_config.json)"
OUTPUT_PANEL = "Output and job control"


class Dtype(str, Enum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class AudioFormat(str, Enum):
    wav = "wav"
    flac = "flac"


class OnBudget(str, Enum):
    ok = "ok"
    fail = "fail"


def _opt(*names: str, panel: str, **kw):
    return typer.Option(*names, rich_help_panel=panel, **kw)


OutDir = Annotated[
    Path, _opt("--out-dir", "-o", panel=OUTPUT_PANEL, help="Folder for audio files and results.")
]
Model = Annotated[
    str, _opt("--model", "-m", panel=MODEL_PANEL, help="Local checkpoint dir or HF repo id.")
]
Device = Annotated[str, _opt("--device", panel=MODEL_PANEL, help="auto, cpu, cuda or cuda:N.")]
DtypeOpt = Annotated[
    Dtype, _opt("--dtype", panel=MODEL_PANEL, help="auto = bfloat16 on CUDA, float32 on CPU.")
]


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


BatchSize = Annotated[
    str,
    _opt(
        "--batch-size",
        "-b",
        panel=MODEL_PANEL,
        help="Rows decoded together (engine slots; freed slots are refilled at once). auto: as "
        "many as the memory plan fits (see qtts plan); a number that cannot fit is refused.",
    ),
]
MaxNewTokens = Annotated[
    int | None,
    _opt(
        "--max-new-tokens",
        min=1,
        panel=MODEL_PANEL,
        help="Talker steps per row, used exactly (a row that never stops gets N-1 frames at "
        "12.5 Hz). Default: min(generation_config max_new_tokens, 100 + 8 x text tokens).",
    ),
]
Speaker = Annotated[
    str | None, _opt("--speaker", panel=VOICE_PANEL, help="Speaker (CustomVoice models).")
]
Language = Annotated[str, _opt("--language", panel=VOICE_PANEL, help="Language, or auto.")]
Instruct = Annotated[
    str | None, _opt("--instruct", panel=VOICE_PANEL, help="Style instruction (1.7B, VoiceDesign).")
]
RefAudio = Annotated[
    Path | None,
    _opt("--ref-audio", panel=VOICE_PANEL, help="Reference clip to clone (Base models)."),
]
RefText = Annotated[
    str | None,
    _opt(
        "--ref-text",
        panel=VOICE_PANEL,
        help="Transcript of the reference clip: in-context cloning. Without it: x-vector only.",
    ),
]
XVectorOnly = Annotated[
    bool,
    _opt(
        "--x-vector-only",
        panel=VOICE_PANEL,
        help="Clone from the speaker embedding alone, ignoring any ref_text.",
    ),
]
Seed = Annotated[
    int, _opt("--seed", min=0, panel=VOICE_PANEL, help="Seed; a manifest seed column overrides.")
]
Greedy = Annotated[
    bool, _opt("--greedy", panel=SAMPLING_PANEL, help="No sampling anywhere (argmax).")
]
Temperature = Annotated[float | None, _opt("--temperature", panel=SAMPLING_PANEL)]
TopK = Annotated[int | None, _opt("--top-k", min=0, panel=SAMPLING_PANEL)]
TopP = Annotated[float | None, _opt("--top-p", panel=SAMPLING_PANEL)]
RepetitionPenalty = Annotated[float | None, _opt("--repetition-penalty", panel=SAMPLING_PANEL)]
SubTemperature = Annotated[float | None, _opt("--subtalker-temperature", panel=SAMPLING_PANEL)]
SubTopK = Annotated[int | None, _opt("--subtalker-top-k", min=0, panel=SAMPLING_PANEL)]
SubTopP = Annotated[float | None, _opt("--subtalker-top-p", panel=SAMPLING_PANEL)]
Format = Annotated[
    AudioFormat, _opt("--format", "-f", panel=OUTPUT_PANEL, help="Audio files (16-bit PCM).")
]
SaveCodes = Annotated[
    bool,
    _opt("--save-codes", panel=OUTPUT_PANEL, help="Also write {id}.codes.npy, int [frames, 16]."),
]
Overwrite = Annotated[
    bool,
    _opt(
        "--overwrite",
        panel=OUTPUT_PANEL,
        help="Redo every row. Default: resume, skipping rows already done (file decodes).",
    ),
]
FailFast = Annotated[
    bool,
    _opt("--fail-fast/--no-fail-fast", panel=OUTPUT_PANEL, help="Stop at the first failed row."),
]
SCALE_PANEL = "Scale out"
NumShards = Annotated[
    int | None,
    _opt(
        "--num-shards",
        min=1,
        panel=SCALE_PANEL,
        help="Split the job into N shards by sha1(id) % N (default: from a Slurm array, srun or "
        "torchrun environment; else 1). Shards share the out dir.",
    ),
]
ShardIndex = Annotated[
    int | None,
    _opt("--shard-index", min=0, panel=SCALE_PANEL, help="This run's shard, 0..N-1."),
]


class Backend(str, Enum):
    local = "local"
    ray = "ray"


BackendOpt = Annotated[
    Backend,
    _opt("--backend", panel=SCALE_PANEL,
         help="local: this process and device. ray: Ray Data actors over a cluster's GPUs "
         "(pip install 'qtts[ray]'); outputs go to a folder every worker can see."),
]  # fmt: skip
RayAddress = Annotated[
    str | None,
    _opt("--ray-address", panel=SCALE_PANEL,
         help="Ray cluster to join [default: RAY_ADDRESS, else a local Ray for this job]."),
]  # fmt: skip
Workers = Annotated[
    int | None,
    _opt("--workers", min=1, panel=SCALE_PANEL,
         help="Ray actors [default: one per GPU in the cluster, or 1 without GPUs]."),
]  # fmt: skip
GpusPerWorker = Annotated[
    float | None,
    _opt("--gpus-per-worker", min=0, panel=SCALE_PANEL,
         help="GPUs per Ray actor [default: 1 when the cluster has GPUs, else 0]."),
]  # fmt: skip
RayTimeout = Annotated[
    float,
    _opt("--ray-timeout", min=0.1, panel=SCALE_PANEL,
         help="Seconds to reach --ray-address before giving up (nothing is written)."),
]  # fmt: skip
DryRun = Annotated[
    bool,
    _opt("--dry-run", panel=OUTPUT_PANEL,
         help="Read and validate every row, scan what is done, plan memory, and print what "
         "would run (one JSON line); load no weights, write nothing."),
]  # fmt: skip
InputMoved = Annotated[
    bool,
    _opt("--input-moved", panel=OUTPUT_PANEL,
         help="The out dir's input was moved or renamed to INPUT: adopt the new path and "
         "resume (a different input is refused otherwise)."),
]  # fmt: skip
MaxFailures = Annotated[
    int | None,
    _opt("--max-failures", min=1, panel=OUTPUT_PANEL, help="Stop after N failed rows (exit 3)."),
]
OnBudgetOpt = Annotated[
    OnBudget,
    _opt(
        "--on-budget",
        panel=OUTPUT_PANEL,
        help="A row that uses its whole frame budget without EOS: ok (kept, flagged "
        "hit_frame_budget in results) or fail.",
    ),
]
LogInterval = Annotated[
    float,
    _opt(
        "--log-interval",
        min=1.0,
        panel=OUTPUT_PANEL,
        help="Seconds between progress log lines when stderr is not a terminal.",
    ),
]
Quiet = Annotated[bool, _opt("--quiet", "-q", panel=OUTPUT_PANEL, help="Warnings and errors only.")]
Verbose = Annotated[bool, _opt("--verbose", "-v", panel=OUTPUT_PANEL, help="Debug logging.")]
