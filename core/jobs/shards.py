"""Deterministic shards of a job, for Slurm/cron arrays: which rows a run owns, and its files.

A row belongs to shard sha1(id) % N (never Python's salted hash()), so reordering or appending to
a manifest never moves a row to another shard, and every process computes the same split. The
shard comes from --num-shards/--shard-index or, when those are absent, from the environment of a
Slurm array, an srun step or torchrun. Each shard has its own lock and journal in the shared out
dir, so shards can run at the same time; an unsharded run keeps the plain names.
Knows ids, names and environment variables; no files are touched here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Shard:
    count: int  # N
    index: int  # 0 <= index < N
    source: str = "unsharded"  # where N and the index came from (logged)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"--num-shards must be >= 1, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(
                f"--shard-index must be in 0..{self.count - 1} for {self.count} shards, "
                f"got {self.index}"
            )

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def owns(self, row_id: str | None) -> bool:
        """Rows with a null id (they fail validation) are reported by shard 0."""
        return shard_of(row_id or "", self.count) == self.index if row_id else self.index == 0

    def _suffix(self) -> str:
        return f"-shard-{self.index}-of-{self.count}" if self.sharded else ""

    @property
    def lock_name(self) -> str:
        return f".qtts{self._suffix()}.lock"

    @property
    def journal_name(self) -> str:
        return f".qtts-journal{self._suffix()}.jsonl"

    def describe(self) -> str:
        return f"shard {self.index} of {self.count} (from {self.source})"


UNSHARDED = Shard(1, 0)


def shard_of(row_id: str, count: int) -> int:
    digest = hashlib.sha1(row_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def resolve_shard(num_shards: int | None, shard_index: int | None, env: Mapping[str, str]) -> Shard:
    """The flags when given (both or neither); else a Slurm array, an srun step or torchrun."""
    if (num_shards is None) != (shard_index is None):
        raise ValueError("give both --num-shards and --shard-index, or neither")
    if num_shards is not None:
        return Shard(num_shards, shard_index, "--num-shards/--shard-index")
    try:
        if "SLURM_ARRAY_TASK_COUNT" in env and "SLURM_ARRAY_TASK_ID" in env:
            # Arrays may start above 0 and step (--array=1-31:2): the index is the task's place.
            first = int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
            step = int(env.get("SLURM_ARRAY_TASK_STEP", "1")) or 1
            index = (int(env["SLURM_ARRAY_TASK_ID"]) - first) // step
            return Shard(int(env["SLURM_ARRAY_TASK_COUNT"]), index, "the Slurm array")
        if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
            return Shard(int(env["SLURM_NTASKS"]), int(env["SLURM_PROCID"]), "srun")
        if int(env.get("WORLD_SIZE", "1")) > 1 and "RANK" in env:
            return Shard(int(env["WORLD_SIZE"]), int(env["RANK"]), "torchrun")
    except ValueError as e:
        raise ValueError(f"cannot read the shard from the environment: {e}") from None
    return UNSHARDED


def local_rank_device(device: str, env: Mapping[str, str]) -> str:
    """torchrun puts one process per GPU: LOCAL_RANK picks cuda:N for --device auto or cuda."""
    rank = env.get("LOCAL_RANK")
    if rank is not None and rank.isdigit() and device in ("auto", "cuda"):
        return f"cuda:{rank}"
    return device
