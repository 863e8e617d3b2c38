"""Deterministic shards of a job: a row belongs to shard sha1(id) % N (never Python's salted
hash()), so reordering or appending to a manifest never moves a row, and every process computes
the same split; N and the index come from the flags or a Slurm, srun or torchrun environment.
Knows ids, names and environment variables; touches no files."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from qtts.core.errors import UsageError

# Per environment (ShardRequest.source): N's variable, and the index as it came. A refusal
# names what it read, never the flags it was not given.
FROM_ENVIRONMENT = {
    "the Slurm array": (
        "SLURM_ARRAY_TASK_COUNT",
        "task {} of the Slurm array (SLURM_ARRAY_TASK_ID minus SLURM_ARRAY_TASK_MIN, over "
        "SLURM_ARRAY_TASK_STEP)",
    ),
    "srun": ("SLURM_NTASKS", "SLURM_PROCID={}"),
    "torchrun": ("WORLD_SIZE", "RANK={}"),
}


@dataclass(frozen=True)
class Shard:
    count: int  # N
    index: int  # 0 <= index < N
    source: str = "unsharded"  # where N and the index came from (logged)

    def __post_init__(self) -> None:
        told = FROM_ENVIRONMENT.get(self.source)
        count = told[0] if told else "--num-shards"
        if self.count < 1:
            raise UsageError(f"{count} must be >= 1, got {self.count}")
        if not 0 <= self.index < self.count:
            if told:
                raise UsageError(
                    f"{told[1].format(self.index)} is outside the {self.count} tasks "
                    f"(0..{self.count - 1}) of {count}={self.count}"
                )
            raise UsageError(
                f"--shard-index must be in 0..{self.count - 1} for {self.count} shards, "
                f"got {self.index}"
            )

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def owns(self, row_id: str | None) -> bool:
        """Rows with a null id (they fail validation) are reported by shard 0."""
        return shard_of(row_id, self.count) == self.index if row_id else self.index == 0

    def mask(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """owns() of every id, as a bool array."""
        if not self.sharded:
            return np.ones(len(ids), dtype=bool)
        return shards_of(ids, self.count) == self.index

    @property
    def suffix(self) -> str:
        """What this shard's files add to their names (qtts.core.jobs.state.paths)."""
        return f"-shard-{self.index}-of-{self.count}" if self.sharded else ""

    def describe(self) -> str:
        return f"shard {self.index} of {self.count} (from {self.source})"


UNSHARDED = Shard(1, 0)


def shard_of(row_id: str, count: int) -> int:
    digest = hashlib.sha1(row_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def shards_of(ids: pa.Array | pa.ChunkedArray, count: int, *, chunk: int = 1 << 16) -> np.ndarray:
    """shard_of every id (null ids: shard 0), a chunk of Python strings at a time."""
    out = np.zeros(len(ids), dtype=np.int64)
    sha1, from_bytes = hashlib.sha1, int.from_bytes
    for start in range(0, len(ids), chunk):
        values = ids.slice(start, chunk).to_pylist()
        out[start : start + len(values)] = [
            from_bytes(sha1(v.encode()).digest()[:8], "big") % count if v else 0 for v in values
        ]
    return out


@dataclass(frozen=True)
class ShardRequest:
    """What this run was told about its shard, before the out dir's record is consulted."""

    count: int | None  # from --num-shards, or the environment (None: unsharded)
    index: int | None
    source: str  # "--num-shards/--shard-index", "the Slurm array", "srun", "torchrun", "none"
    task_id: int | None = None  # Slurm array task id / srun or torchrun rank, as given
    array_min: int | None = None  # Slurm array: first task id and step (index = (id-min)/step)
    array_step: int | None = None

    @property
    def explicit(self) -> bool:
        return self.source == "--num-shards/--shard-index"

    @property
    def from_environment(self) -> bool:
        return self.count is not None and not self.explicit


def shard_request(
    num_shards: int | None, shard_index: int | None, env: Mapping[str, str]
) -> ShardRequest:
    """The flags when given (both or neither); else a Slurm array, an srun step or torchrun."""
    if num_shards == 1 and shard_index is None:
        shard_index = 0  # "--num-shards 1": one shard, whatever the environment says
    if (num_shards is None) != (shard_index is None):
        raise UsageError("give both --num-shards and --shard-index, or neither")
    if num_shards is not None:
        return ShardRequest(num_shards, shard_index, "--num-shards/--shard-index")
    if "SLURM_ARRAY_TASK_COUNT" in env and "SLURM_ARRAY_TASK_ID" in env:
        # Arrays may start above 0 and step (--array=1-31:2): the index is the task's place.
        first = _whole(env, "SLURM_ARRAY_TASK_MIN", "0")
        step = _whole(env, "SLURM_ARRAY_TASK_STEP", "1") or 1
        task = _whole(env, "SLURM_ARRAY_TASK_ID")
        count = _whole(env, "SLURM_ARRAY_TASK_COUNT")
        index = (task - first) // step
        return ShardRequest(count, index, "the Slurm array", task, array_min=first, array_step=step)
    if "SLURM_PROCID" in env and _whole(env, "SLURM_NTASKS", "1") > 1:
        rank = _whole(env, "SLURM_PROCID")
        return ShardRequest(_whole(env, "SLURM_NTASKS"), rank, "srun", rank)
    if "RANK" in env and _whole(env, "WORLD_SIZE", "1") > 1:
        rank = _whole(env, "RANK")
        return ShardRequest(_whole(env, "WORLD_SIZE"), rank, "torchrun", rank)
    return ShardRequest(None, None, "none")


def _whole(env: Mapping[str, str], name: str, default: str | None = None) -> int:
    """env[name] (or default) as an int; a bad value is refused naming the variable."""
    value = env.get(name, default)
    try:
        return int(value)
    except ValueError:
        raise UsageError(
            f"cannot read the shard from the environment: {name}={value!r} is not a whole number"
        ) from None


def local_rank_device(device: str, env: Mapping[str, str]) -> str:
    """torchrun puts one process per GPU: LOCAL_RANK picks cuda:N for --device auto or cuda."""
    rank = env.get("LOCAL_RANK")
    if rank is not None and rank.isdigit() and device in ("auto", "cuda"):
        return f"cuda:{rank}"
    return device
