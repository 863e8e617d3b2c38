"""qtts as a real process on the fake model: signals, kill -9 and rerun, the lock, import cost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
import soundfile as sf
from fakes import fake_env, qtts_cmd

from qtts.core.jobs.state.lock import OutDirLock
from qtts.core.jobs.state.paths import StatePaths

ROWS = 24


@pytest.fixture
def manifest(write_manifest):
    return write_manifest([{"id": f"u{i:02d}", "text": f"sentence {i}"} for i in range(ROWS)])


def start(*args, **env) -> subprocess.Popen:
    return subprocess.Popen(
        qtts_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=fake_env(**env)
    )


def wait_for(predicate, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def journal_lines(out) -> int:
    try:
        return StatePaths(out).journal("").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def litter(out) -> list[str]:
    return [p.name for p in out.iterdir() if ".qtts-tmp-" in p.name]


def snapshot(out) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("*.wav")}


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_flushes_and_exits(tmp_path, manifest, sig, code):
    out = tmp_path / "out"
    p = start("batch", manifest, "-o", out, "--speaker", "ryan", "-b", "2", QTTS_FAKE_DELAY="0.1")
    wait_for(lambda: journal_lines(out) >= 4)
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=30)
    assert p.returncode == code, stderr.decode()
    s = json.loads(stdout.decode().strip().splitlines()[-1])
    assert s["status"] == "interrupted" and s["pending"] > 0 and s["ok"] >= 4
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert len(rows) == s["ok"] and all(r["status"] == "ok" for r in rows)
    assert all(sf.read(r["path"])[0].size for r in rows)
    assert litter(out) == []
    with OutDirLock(StatePaths(out).lock("")):  # released
        pass
    before = snapshot(out)
    r = subprocess.run(qtts_cmd("batch", manifest, "-o", out, "--speaker", "ryan"),
                       capture_output=True, env=fake_env())  # fmt: skip
    assert r.returncode == 0
    assert json.loads(r.stdout.decode().splitlines()[-1])["skipped"] == s["ok"]
    after = snapshot(out)
    assert all(after[name] == stamp for name, stamp in before.items())


def test_kill_9_then_rerun_finishes(tmp_path, manifest):
    out = tmp_path / "out"
    p = start("batch", manifest, "-o", out, "--speaker", "ryan", "-b", "3", QTTS_FAKE_DELAY="0.05")
    wait_for(lambda: journal_lines(out) >= 6)
    p.kill()
    p.wait(timeout=30)
    before = snapshot(out)
    r = subprocess.run(qtts_cmd("batch", manifest, "-o", out, "--speaker", "ryan"),
                       capture_output=True, env=fake_env())  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert len(rows) == ROWS and {r["status"] for r in rows} <= {"ok", "skipped"}
    assert all(sf.read(r["path"])[0].size for r in rows)
    assert litter(out) == []
    after = snapshot(out)
    assert all(after[name] == stamp for name, stamp in before.items() if name in after)


def test_second_sigint_exits_at_once(tmp_path, write_manifest):
    m = write_manifest([{"id": "a", "text": "never ends [stubborn]"}])
    out = tmp_path / "out"
    mark = tmp_path / "busy"
    p = start("batch", m, "-o", out, "--speaker", "ryan", QTTS_FAKE_MARK=str(mark))
    wait_for(mark.exists)
    p.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert p.poll() is None  # the stubborn synthesizer ignored the first one
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=10)  # far less than the 60 s the fake would sleep
    assert p.returncode == 130
    assert litter(out) == []


def test_lock_held_by_another_run_exits_75(tmp_path, write_manifest):
    m = write_manifest([{"id": "a", "text": "slow one [slow]"}])
    out = tmp_path / "out"
    mark = tmp_path / "busy"
    first = start("batch", m, "-o", out, "--speaker", "ryan", QTTS_FAKE_MARK=str(mark))
    try:
        wait_for(mark.exists)
        r = subprocess.run(qtts_cmd("batch", m, "-o", out, "--speaker", "ryan"),
                           capture_output=True, env=fake_env(), timeout=30)  # fmt: skip
        assert r.returncode == 75
        assert f"pid {first.pid}" in r.stderr.decode() and r.stderr.startswith(b"Error: ")
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=30)
    assert first.returncode == 143


def test_lock_held_by_a_plain_flock_exits_75(tmp_path, write_manifest):
    m = write_manifest([{"id": "a", "text": "x"}])
    out = tmp_path / "out"
    StatePaths(out).dir.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX);"
         "print('held', flush=True); time.sleep(60)", str(StatePaths(out).lock(""))],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == b"held"
        r = subprocess.run(qtts_cmd("batch", m, "-o", out, "--speaker", "ryan"),
                           capture_output=True, env=fake_env(), timeout=30)  # fmt: skip
        assert r.returncode == 75 and b"run.lock is held by" in r.stderr
        if os.path.exists("/proc/locks"):
            assert f"pid {holder.pid}".encode() in r.stderr
        assert not (out / "results.parquet").exists()  # refused before writing anything
    finally:
        holder.kill()
        holder.wait()
    r = subprocess.run(qtts_cmd("batch", m, "-o", out, "--speaker", "ryan"),
                       capture_output=True, env=fake_env(), timeout=30)  # fmt: skip
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] == 1, r.stderr  # the lock went with it


def test_help_does_not_import_torch():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from qtts.cli.app import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0 and 'Exit codes' in r.stdout, r.stdout\n"
        "heavy = [m for m in ('torch', 'transformers', 'numpy', 'pyarrow') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=fake_env())
    assert r.returncode == 0, r.stderr.decode()


def test_stdout_is_only_the_summary(tmp_path):
    r = subprocess.run(qtts_cmd("synth", "-", "--speaker", "ryan", "-o", tmp_path / "o"),
                       input=b"one\ntwo\n", capture_output=True, env=fake_env())  # fmt: skip
    assert r.returncode == 0
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["ok"] == 2
    assert b"qtts INFO" in r.stderr
