"""`qtts results` on an out dir it cannot write (a published dataset on a read-only mount): exit
0, or 3 for failed rows, with the counts and the quality from the state as it is, one line saying
the views were not rebuilt, and nothing written there. Three ways to make it unwritable: a real
read-only bind mount (where this process may mount: root in a container), `chmod -R a-w` (not
as root, whom permissions do not stop) and a results lock no one can open (anyone)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from cli_calls import qtts
from fakes import fake_env, qtts_cmd

pytestmark = pytest.mark.usefixtures("fake_model")
NOT_REBUILT = "were not rebuilt; the counts and quality below are read from its state as it is"


@pytest.fixture
def out(tmp_path):
    """A finished job of 2 ok rows and 1 failed, its results.parquet then removed: what
    `qtts results` reports must come from the state, not from a view."""
    src = tmp_path / "lines.txt"
    src.write_text("One line.\nTwo lines here.\nThis one fails [fail].\n")
    out = tmp_path / "out"
    assert qtts("synth", src, "--speaker", "vivian", "-o", out).exit_code == 3
    (out / "results.parquet").unlink()
    return out


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root: its size and mtime (anything written would change it)."""
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def said(stdout: str, stderr: str) -> dict:
    """The JSON line, after checking the counts and the note on stderr."""
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert (summary["total"], summary["ok"], summary["failed"]) == (3, 2, 1)
    assert summary["rebuilt"] is False and summary["quality"]["ok"] == 2
    assert "2 of 3 rows ok, 1 failed, 0 pending" in stderr
    assert sum(NOT_REBUILT in line for line in stderr.splitlines()) == 1, stderr
    assert "quality of 2 ok rows" in stderr
    return summary


def test_a_results_lock_no_one_can_open_is_read_without_writing(out, tmp_path, monkeypatch):
    """OUT/.qtts can be written here: the views are built aside there (not in $TMPDIR, which a
    ten-million-row job's staged columns would fill), and nothing is left."""
    from qtts.core.jobs.output import results as views_aside

    lock = out / ".qtts" / "results.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()  # opening it to write fails for root too (EISDIR)
    killed = out / ".qtts" / f"{views_aside.ASIDE_PREFIX}killed"  # a reader killed mid-build
    killed.mkdir()
    (killed / "results.parquet").write_bytes(b"half")
    os.utime(killed, (0, 0))
    before = {k: v for k, v in tree(out).items() if "killed" not in k}
    page = tmp_path / "page.html"
    asides = []
    build = views_aside.rebuild_once
    monkeypatch.setattr(views_aside, "rebuild_once",
                        lambda *a: asides.append(a[3]) or build(*a))  # fmt: skip
    r = qtts("results", out, "--report", page)
    assert r.exit_code == 3, r.output
    said(r.stdout, r.stderr)
    assert f"cannot open {lock}" in r.stderr
    assert [p.parent for p in asides] == [out / ".qtts"] and not asides[0].exists()
    assert not killed.exists()  # its lock held by nobody: the next reader removed it
    after = tree(out)
    del before[".qtts"], after[".qtts"]  # the folder's own mtime: the aside was made in it
    assert after == before and not (out / "results.parquet").exists()
    assert "2 ok rows" in page.read_text() and f"Quality of {out}" in page.read_text()


def test_a_read_only_copy_by_permissions_is_read(out):
    if os.geteuid() == 0:
        pytest.skip("root writes through permissions (the other two tests cover it)")
    modes = {p: p.stat().st_mode for p in [out, *out.rglob("*")]}
    for p in modes:
        p.chmod(modes[p] & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        before = tree(out)
        r = qtts("results", out)
        assert r.exit_code == 3, r.output
        said(r.stdout, r.stderr)
        assert tree(out) == before
        r = qtts("results", out, "--min-dnsmos", "3")
        assert r.exit_code == 2 and "cannot save the keep rules" in r.stderr
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


def _mounted(source: Path, target: Path, *args) -> list[str]:
    """A command run with `source` bound read-only at `target`, in a mount namespace of its
    own (nothing outside sees the mount; it goes when the command ends)."""
    script = 'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && shift 2 && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", script, "sh", str(source), str(target), *args]


def test_a_read_only_bind_mount_is_read(out, tmp_path):
    target = tmp_path / "published"
    target.mkdir()
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    probe = subprocess.run(_mounted(out, target, "touch", str(target / "x")),
                           capture_output=True, text=True)  # fmt: skip
    if "Read-only file system" not in probe.stderr:
        pytest.skip(f"no read-only bind mount here: {probe.stderr.strip()[:200]}")
    before = tree(out)
    r = subprocess.run(_mounted(out, target, *qtts_cmd("results", target)), capture_output=True,
                       text=True, env=fake_env(), timeout=120)  # fmt: skip
    assert r.returncode == 3, r.stderr
    said(r.stdout, r.stderr)
    assert "Read-only file system" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(_mounted(out, target, *qtts_cmd("results", target, "--max-cer", "0.1")),
                       capture_output=True, text=True, env=fake_env(), timeout=120)  # fmt: skip
    errors = [x for x in r.stderr.splitlines() if x.startswith("Error:")]
    assert r.returncode == 2 and len(errors) == 1 and "cannot save the keep rules" in errors[0]
    assert tree(out) == before


def test_a_writable_out_dir_is_still_rebuilt(out):
    r = qtts("results", out)
    assert r.exit_code == 3 and NOT_REBUILT not in r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["rebuilt"] is True
    assert (out / "results.parquet").exists()
