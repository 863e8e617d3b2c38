"""`--dry-run` meets the refusals the run would meet at its locks, through the console script
(a subprocess, the fake model): with shard 0 of 2 running (its lock held by another process),
a dry run of that shard exits 75 and one that would --overwrite the split into 3 exits 2, each
with the real run's exact line, and neither creates or changes a file in the out dir."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest
from fakes import fake_env, qtts_cmd

HOLD = """
import sys, time
from filelock import FileLock
with FileLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(qtts_cmd(*args), capture_output=True, text=True, env=fake_env(),
                          timeout=120)  # fmt: skip


def one_error(proc) -> str:
    errors = [x for x in proc.stderr.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return errors[0]


def snapshot(out) -> dict[str, tuple[int, int]]:
    """Every file under the out dir with its size and mtime: what a dry run must leave alone."""
    return {str(p.relative_to(out)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(out.rglob("*"))}  # fmt: skip


@contextlib.contextmanager
def held(path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture
def split_in_two(tmp_path, write_manifest):
    """(manifest, out dir) after shard 0 of 2 ran: the out dir records 2 shards."""
    rows = [{"id": f"u{i:02d}", "text": f"sentence {i}"} for i in range(12)]
    manifest, out = write_manifest(rows), tmp_path / "out"
    shard0 = ("--num-shards", 2, "--shard-index", 0)
    assert run("batch", manifest, "-o", out, "--speaker", "ryan", *shard0).returncode == 0
    return manifest, out


def test_a_dry_run_of_a_running_shard_exits_75_like_the_run(split_in_two):
    manifest, out = split_in_two
    job = ("batch", manifest, "-o", out, "--speaker", "ryan", "--num-shards", 2, "--shard-index", 0)
    with held(out / ".qtts" / "run-shard-0-of-2.lock") as pid:
        before = snapshot(out)
        dry = run(*job, "--dry-run")
        assert snapshot(out) == before
        real = run(*job)
    assert dry.returncode == real.returncode == 75, dry.stderr
    assert one_error(dry) == one_error(real) and f"pid {pid}" in one_error(dry)
    assert "dry run:" not in dry.stderr and not dry.stdout.strip()


def test_a_dry_run_that_would_change_the_count_under_a_running_shard_exits_2(split_in_two):
    manifest, out = split_in_two
    job = ("batch", manifest, "-o", out, "--speaker", "ryan", "--overwrite", "--num-shards", 3,
           "--shard-index", 0)  # fmt: skip
    with held(out / ".qtts" / "run-shard-0-of-2.lock"):
        before = snapshot(out)
        dry = run(*job, "--dry-run")
        assert snapshot(out) == before
        real = run(*job)
    assert dry.returncode == real.returncode == 2, dry.stderr
    assert one_error(dry) == one_error(real)
    assert "holds run-shard-0-of-2.lock" in one_error(dry)
    after = run(*job, "--dry-run")  # the old split gone: the dry run plans again
    assert after.returncode == 0 and "to synthesize" in after.stderr, after.stderr
