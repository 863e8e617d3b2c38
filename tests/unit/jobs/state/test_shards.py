"""Shard assignment and where a run's shard comes from (flags, Slurm array, srun, torchrun)."""

import pyarrow as pa
import pytest

from qtts.core.errors import UsageError
from qtts.core.jobs.state.shards import (
    UNSHARDED,
    Shard,
    local_rank_device,
    shard_of,
    shard_request,
    shards_of,
)


def resolve_shard(num_shards, shard_index, env) -> Shard:
    """What a run is told, on an out dir that records nothing yet."""
    req = shard_request(num_shards, shard_index, env)
    return UNSHARDED if req.count is None else Shard(req.count, req.index, req.source)


def test_assignment_is_sha1_of_the_id_and_does_not_move_when_the_manifest_changes():
    ids = [f"utt-{i:05d}" for i in range(2000)]
    before = {i: shard_of(i, 16) for i in ids}
    reordered = list(reversed(ids)) + [f"new-{i}" for i in range(500)]  # appended rows too
    assert all(shard_of(i, 16) == before[i] for i in reordered if i in before)
    counts = [sum(v == s for v in before.values()) for s in range(16)]
    assert min(counts) > 80 and max(counts) < 170  # spread, about 125 each
    assert shard_of("utt-00000", 16) == int.from_bytes(
        __import__("hashlib").sha1(b"utt-00000").digest()[:8], "big"
    ) % 16  # fmt: skip


def test_every_row_has_exactly_one_shard():
    shards = [Shard(5, i) for i in range(5)]
    for row_id in [f"r{i}" for i in range(300)] + [None]:
        assert sum(s.owns(row_id) for s in shards) == 1
    assert Shard(5, 0).owns(None)  # null ids (validation failures) are shard 0's to report


def test_the_vectorized_assignment_is_shard_of():
    ids = [f"r{i}" for i in range(3000)] + [None, "日本"]
    got = shards_of(pa.chunked_array([pa.array(ids)]), 7, chunk=1000)
    assert got.tolist() == [shard_of(i, 7) if i else 0 for i in ids]
    assert Shard(7, 3).mask(pa.array(ids)).tolist() == [Shard(7, 3).owns(i) for i in ids]


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, (1, 0, "unsharded")),
        ({"SLURM_ARRAY_TASK_COUNT": "16", "SLURM_ARRAY_TASK_ID": "3"}, (16, 3, "Slurm array")),
        ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "7",
          "SLURM_ARRAY_TASK_MIN": "5"}, (4, 2, "Slurm array")),  # arrays can start above 0
        ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1",
          "SLURM_ARRAY_TASK_STEP": "2"}, (4, 2, "Slurm array")),  # --array=1-7:2
        ({"SLURM_NTASKS": "8", "SLURM_PROCID": "6"}, (8, 6, "srun")),
        ({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}, (1, 0, "unsharded")),
        ({"WORLD_SIZE": "4", "RANK": "1", "LOCAL_RANK": "1"}, (4, 1, "torchrun")),
    ],
)  # fmt: skip
def test_the_shard_comes_from_the_environment(env, want):
    shard = resolve_shard(None, None, env)
    assert (shard.count, shard.index) == want[:2] and want[2] in shard.source


def test_flags_win_and_come_in_pairs():
    env = {"SLURM_ARRAY_TASK_COUNT": "16", "SLURM_ARRAY_TASK_ID": "3"}
    assert (resolve_shard(2, 1, env).count, resolve_shard(2, 1, env).index) == (2, 1)
    with pytest.raises(UsageError, match="both --num-shards and --shard-index"):
        resolve_shard(4, None, {})
    with pytest.raises(UsageError, match="must be in 0..3"):
        resolve_shard(4, 4, {})


def test_torchrun_local_rank_picks_the_gpu():
    env = {"LOCAL_RANK": "2"}
    assert local_rank_device("auto", env) == "cuda:2" == local_rank_device("cuda", env)
    assert local_rank_device("cpu", env) == "cpu" and local_rank_device("cuda:0", env) == "cuda:0"
    assert local_rank_device("auto", {}) == "auto"


def test_each_shard_has_its_own_lock_journal_and_state(tmp_path):
    from qtts.core.jobs.state.paths import StatePaths

    paths, one, s3 = StatePaths(tmp_path), UNSHARDED.suffix, Shard(16, 3).suffix
    names = [p.relative_to(tmp_path).as_posix() for p in (paths.lock(one), paths.journal(one),
             paths.state(one), paths.lock(s3), paths.journal(s3), paths.state(s3))]  # fmt: skip
    assert names == [".qtts/run.lock", ".qtts/journal.jsonl", ".qtts/state.parquet",
                     ".qtts/run-shard-3-of-16.lock", ".qtts/journal-shard-3-of-16.jsonl",
                     ".qtts/state-shard-3-of-16.parquet"]  # fmt: skip
    paths.dir.mkdir()
    for path in (paths.journal(one), paths.journal(s3), paths.ray_journal("abc")):
        path.touch()
    assert set(paths.own_journals(one)) == {paths.journal(one), paths.ray_journal("abc")}
    assert paths.own_journals(s3) == [paths.journal(s3)]


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_MIN": "4"},
         "task 5 of the Slurm array (SLURM_ARRAY_TASK_ID minus SLURM_ARRAY_TASK_MIN, over "
         "SLURM_ARRAY_TASK_STEP) is outside the 4 tasks (0..3) of SLURM_ARRAY_TASK_COUNT=4"),
        ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "2"},
         "task -1 of the Slurm array (SLURM_ARRAY_TASK_ID minus SLURM_ARRAY_TASK_MIN, over "
         "SLURM_ARRAY_TASK_STEP) is outside the 4 tasks (0..3) of SLURM_ARRAY_TASK_COUNT=4"),
        ({"SLURM_ARRAY_TASK_COUNT": "0", "SLURM_ARRAY_TASK_ID": "0"},
         "SLURM_ARRAY_TASK_COUNT must be >= 1, got 0"),
        ({"SLURM_NTASKS": "4", "SLURM_PROCID": "4"},
         "SLURM_PROCID=4 is outside the 4 tasks (0..3) of SLURM_NTASKS=4"),
        ({"WORLD_SIZE": "2", "RANK": "-1"},
         "RANK=-1 is outside the 2 tasks (0..1) of WORLD_SIZE=2"),
    ],
)  # fmt: skip
def test_a_shard_outside_the_environment_names_its_variables(env, error):
    with pytest.raises(UsageError) as e:
        resolve_shard(None, None, env)
    assert str(e.value) == error and "--" not in str(e.value)  # no flag was given


@pytest.mark.parametrize(
    ("env", "bad"),
    [
        ({"SLURM_ARRAY_TASK_COUNT": "four", "SLURM_ARRAY_TASK_ID": "1"},
         "SLURM_ARRAY_TASK_COUNT='four'"),
        ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "1.0"},
         "SLURM_ARRAY_TASK_ID='1.0'"),
        ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": ""},
         "SLURM_ARRAY_TASK_MIN=''"),
        ({"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_STEP": "x"},
         "SLURM_ARRAY_TASK_STEP='x'"),
        ({"SLURM_NTASKS": "n", "SLURM_PROCID": "0"}, "SLURM_NTASKS='n'"),
        ({"SLURM_NTASKS": "4", "SLURM_PROCID": "first"}, "SLURM_PROCID='first'"),
        ({"WORLD_SIZE": "abc", "RANK": "0"}, "WORLD_SIZE='abc'"),
        ({"WORLD_SIZE": "4", "RANK": "zero"}, "RANK='zero'"),
    ],
)  # fmt: skip
def test_an_unreadable_variable_is_named_with_its_value(env, bad):
    with pytest.raises(UsageError) as e:
        resolve_shard(None, None, env)
    assert str(e.value) == (
        f"cannot read the shard from the environment: {bad} is not a whole number"
    )


def test_a_variable_of_a_source_not_in_use_is_not_read():
    """SLURM_NTASKS without SLURM_PROCID (or WORLD_SIZE without RANK) makes no shard: not read."""
    assert resolve_shard(None, None, {"SLURM_NTASKS": "n", "WORLD_SIZE": "abc"}) == UNSHARDED


def test_explicit_flags_keep_their_messages_whatever_the_environment():
    env = {"WORLD_SIZE": "abc", "RANK": "x"}  # not read: the flags win
    with pytest.raises(UsageError, match=r"^--shard-index must be in 0..1 for 2 shards, got 2$"):
        resolve_shard(2, 2, env)
    with pytest.raises(UsageError, match=r"^--num-shards must be >= 1, got 0$"):
        resolve_shard(0, 0, env)
