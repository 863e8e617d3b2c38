"""`--dry-run` meets the refusals the run would meet at its out dir: a file where the out dir (or
a folder above it, or its .qtts) should be, or a folder it may not write, exits 2 with the real
run's exact line, before any state is read, and neither creates anything. Fake model, in
process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_calls import qtts

pytestmark = pytest.mark.usefixtures("fake_model")


def files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def inputs(tmp_path, write_manifest):
    """{kind: input}: a manifest for qtts batch and a text file for qtts synth."""
    text = tmp_path / "lines.txt"
    text.write_text("hello\nworld\n")
    return {"batch": write_manifest([{"id": "a", "text": "hello"}]), "synth": text}


def refusal(kind, source, out, *flags) -> str:
    """The one line of a run that exits 2 and says no more."""
    r = qtts(kind, source, "-o", out, "--speaker", "ryan", *flags)
    assert r.exit_code == 2, r.output
    errors = [x for x in r.stderr.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and "WARNING" not in r.stderr and not r.stdout.strip(), r.stderr
    return errors[0]


def dry_and_real(kind, source, out) -> tuple[str, str]:
    return refusal(kind, source, out, "--dry-run"), refusal(kind, source, out)


@pytest.mark.parametrize("kind", ["batch", "synth"])
@pytest.mark.parametrize("under", ["", "sub"])
def test_an_out_dir_under_a_file_is_refused_as_the_run_refuses_it(tmp_path, inputs, kind, under):
    afile = tmp_path / "afile"
    afile.write_text("")
    out = afile / under if under else afile
    before = files(tmp_path)
    dry, real = dry_and_real(kind, inputs[kind], out)
    assert dry == real == f"Error: cannot create --out-dir {out / '.qtts'}: Not a directory"
    assert files(tmp_path) == before


def test_a_file_named_qtts_is_refused_as_the_run_refuses_it(tmp_path, inputs):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".qtts").write_text("")
    dry, real = dry_and_real("batch", inputs["batch"], out)
    assert dry == real == f"Error: cannot create --out-dir {out / '.qtts'}: File exists"
    assert files(out) == [".qtts"]


def deny(monkeypatch, denied):
    """os.access refuses `denied` to write: root may write anything, so the test says no."""
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != denied and access(p, mode))


def test_a_qtts_it_may_not_write_is_refused_as_the_run_refuses_it(tmp_path, inputs, monkeypatch):
    out = tmp_path / "out"
    (out / ".qtts").mkdir(parents=True)
    deny(monkeypatch, out / ".qtts")
    dry, real = dry_and_real("batch", inputs["batch"], out)
    assert dry == real == f"Error: cannot write to --out-dir {out / '.qtts'}: permission denied"
    assert files(out) == [".qtts"]


def test_a_parent_it_may_not_write_is_refused_as_mkdir_would_refuse_it(
    tmp_path, inputs, monkeypatch
):
    """Only the dry run: the run's mkdir asks the kernel, which lets root write anyway."""
    out = tmp_path / "ro" / "out"
    out.parent.mkdir()
    deny(monkeypatch, out.parent)
    dry = refusal("batch", inputs["batch"], out, "--dry-run")
    assert dry == f"Error: cannot create --out-dir {out / '.qtts'}: Permission denied"
    assert not out.exists()


def test_a_dangling_link_as_the_out_dir_is_refused_as_the_run_refuses_it(tmp_path, inputs):
    out = tmp_path / "gone"
    out.symlink_to(tmp_path / "nowhere")
    dry, real = dry_and_real("batch", inputs["batch"], out)
    assert dry == real and "File exists" in dry
    assert not (tmp_path / "nowhere").exists()
