"""The out dir's job file (.qtts/job.json): the input, the shard count and what else the out dir
pins (its CPU `--dtype auto`, the default seed, its output), checked before anything is created
and recorded under a short lock (docs/job-state.md, "The input and the shard count are pinned"
and the sections after it). Knows the job file and lock names; no rows, no models."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.spec import JobSpec
from qtts.core.jobs.state.atomic_files import atomic_write_bytes
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.shards import UNSHARDED, Shard, ShardRequest

log = logging.getLogger("qtts")

JOB_LOCK_TIMEOUT_S = 60  # the job lock guards short sections: reading and writing small files
FORMAT = 2  # 2: per-shard Parquet state and row fingerprints
CPU_AUTO_DTYPES = ("bfloat16", "float32")
SEED_RULES = ("id", "zero")  # a row without a seed: its id's (validation.id_seed), or 0
# What a job file from before each pin meant (docs/job-state.md): auto in fp32 on a CPU, seed 0.
UNPINNED_CPU_AUTO, UNPINNED_SEED_RULE = "float32", "zero"


@dataclass(frozen=True)
class JobFile:
    kind: str  # "synth" | "batch"
    source: str  # absolute path of the input, or "-" (stdin)
    num_shards: int = 1
    array_min: int | None = None  # N came from a Slurm array starting here ...
    array_step: int | None = None  # ... with this step: task id -> shard index
    format: int = FORMAT
    cpu_auto_dtype: str | None = None  # --dtype auto on a CPU here; None: not resolved yet
    columns: dict[str, str] | None = None  # qtts batch: field -> its column, where renamed
    layout: str | None = None  # --output and --format as last recorded; None: never recorded
    audio_format: str | None = None
    default_seed: str | None = None  # of SEED_RULES; None: not recorded yet


def read_job_file(out_dir: Path, *, legacy_ok: bool = False) -> JobFile | None:
    """The recorded job, or None when the out dir holds none yet (legacy_ok: nor one of qtts
    0.1, which --overwrite replaces)."""
    paths = StatePaths(out_dir)
    if paths.legacy() and not legacy_ok:
        raise UsageError(
            f"{out_dir} was written by qtts 0.1, which kept no row fingerprints: "
            "redo it with --overwrite, or use a new --out-dir"
        )
    path = paths.job_file
    try:
        data = json.loads(path.read_text("utf-8"))
    except (FileNotFoundError, NotADirectoryError):  # no out dir yet (or it cannot be one)
        return None
    except (OSError, ValueError) as e:
        raise UsageError(
            f"{path} is unreadable ({e}); remove it or use another --out-dir"
        ) from None
    known = {k: data[k] for k in JobFile.__dataclass_fields__ if k in data}
    known.setdefault("format", 1)
    known.setdefault("cpu_auto_dtype", UNPINNED_CPU_AUTO)
    known.setdefault("default_seed", UNPINNED_SEED_RULE)
    for key, allowed in (("default_seed", SEED_RULES), ("cpu_auto_dtype", CPU_AUTO_DTYPES)):
        if known[key] not in (None, *allowed):
            raise UsageError(
                f"{path}: {key} must be {' or '.join(allowed)} (or null), got {known[key]!r}; "
                "fix it or use another --out-dir"
            )
    if known["format"] > FORMAT:
        raise UsageError(
            f"{path} was written by a newer qtts (job format {known['format']}); "
            "upgrade qtts to resume this out dir"
        )
    try:
        return JobFile(**known)
    except TypeError as e:
        raise UsageError(f"{path} is not a qtts job file ({e})") from None


def seed_rule_for(recorded: JobFile | None, *, overwrite: bool) -> str:
    """The seed rule of rows without a seed: the out dir's, or "id" (new out dir, --overwrite)."""
    if recorded is None or overwrite or recorded.default_seed is None:
        return "id"
    return recorded.default_seed


def write_job_file(out_dir: Path, job: JobFile) -> None:
    data = (json.dumps(asdict(job), indent=2) + "\n").encode()
    atomic_write_bytes(StatePaths(out_dir).job_file, data)


def check_input(spec: JobSpec, recorded: JobFile | None, source: str) -> None:
    out_dir = spec.output.out_dir
    if recorded is None or spec.output.input_moved or spec.output.overwrite:
        return
    if (recorded.kind, recorded.source) != (spec.kind.value, source):
        what = "text lines" if recorded.kind == "synth" else "manifest"
        raise UsageError(
            f"{out_dir} holds the job of {recorded.source} ({what}; recorded in .qtts/job.json), "
            f"not {source}: pass --input-moved if it is the same input moved or renamed, "
            "--overwrite to start afresh, or use another --out-dir"
        )


def resolve_shard(
    out_dir: Path,
    req: ShardRequest,
    recorded: JobFile | None,
    *,
    overwrite: bool,
    announce: bool = True,
) -> Shard:
    """This run's shard: what it was told, reconciled with the N the out dir records.
    announce: log a remapped task (once a run: not when the job lock re-checks it)."""
    if recorded is None or recorded.num_shards == (req.count or 1) or overwrite:
        return UNSHARDED if req.count is None else Shard(req.count, req.index, req.source)
    n = recorded.num_shards
    where = f"{out_dir} is split into {n} shard{'s' if n > 1 else ''} (recorded in .qtts/job.json)"
    if req.count is None:
        raise UsageError(
            f"{where}: run a shard of it with --num-shards {n} --shard-index "
            f"0..{n - 1}, or start afresh with --overwrite"
        )
    if req.explicit:
        raise UsageError(
            f"--num-shards {req.count} disagrees: {where}; use --num-shards {n}, "
            "or --overwrite to start afresh with the new count"
        )
    index = req.task_id  # a Slurm array's task: its place in the array as recorded
    if index is not None and req.source == "the Slurm array" and recorded.array_min is not None:
        index = (index - recorded.array_min) // (recorded.array_step or 1)
    if index is None or not 0 <= index < n:
        raise UsageError(
            f"{req.source} says {req.count} shard(s), task {req.task_id}, but {where} and task "
            f"{req.task_id} is not one of them; pass --num-shards {n} --shard-index I"
        )
    shard = Shard(n, index, f"{req.source} task {req.task_id}, N as the out dir records it")
    if announce:
        told = f"{req.source} gives {req.count} shard(s)"
        log.info("%s but %s: running task %s as %s", told, where, req.task_id, shard.describe())
    return shard


def job_for(
    kind: str, source: str, shard: Shard, req: ShardRequest, columns: dict[str, str] | None = None
) -> JobFile:
    """What this run records: the array's numbering when N came from that array."""
    array = req.source == "the Slurm array" and req.count == shard.count
    first, step = (req.array_min, req.array_step) if array else (None, None)
    return JobFile(kind, source, shard.count, first, step, columns=dict(columns or {}) or None)
