"""The output registry: every layout module in stores/formats/ (files among them, found as the
archive formats are) is a --output choice with its help, each file name in OUT/data/ belongs to
one format's part at most, a module breaking a rule stops the registry, an unknown layout or
location is an error (never read as some default format), and `qtts --help` reads the layouts
without pyarrow or numpy."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from qtts.core.errors import FatalError, UsageError
from qtts.core.jobs.contract.spec import JobSpec, OutputOptions
from qtts.core.jobs.execution.run import prepare_job
from qtts.core.jobs.output.stores import registry
from qtts.core.jobs.output.stores.archive import ArchiveFormat, Part
from qtts.core.jobs.output.stores.formats import files
from qtts.core.jobs.output.stores.layout import Layout
from qtts.core.jobs.output.stores.open_store import StoreSpec
from qtts.core.jobs.output.stores.presence import layouts
from qtts.core.jobs.output.stores.registry import (
    FormatError,
    OutputLayout,
    _overlap,
    default_layout,
    formats,
    holder,
    layouts_help,
    part_of,
)


def test_every_layout_is_a_choice_with_its_help():
    found = formats()
    assert {"files", "webdataset", "parquet", "shar"} <= set(found)
    assert all(isinstance(fmt, Layout) for fmt in found.values())
    assert [m.value for m in OutputLayout] == list(found)
    help_text = layouts_help()
    for fmt in found.values():
        assert f"{fmt.name}: {fmt.help}" in help_text
        assert OutputLayout.parse(fmt.name, "--output") == fmt.name


def test_the_files_layout_is_found_as_the_formats_are():
    """files is one module of formats/ declaring FORMAT: the registry's, as every other layout
    (and the default one, first in --output's choices); nothing registers it by hand."""
    assert files.FORMAT is formats()["files"] is default_layout()
    assert list(formats())[0] == "files" and StoreSpec().layout == "files"
    assert [f.name for f in formats().values() if f.default] == ["files"]
    assert registry.discover(registry.FORMATS_PACKAGE)["files"] is files.FORMAT


def _archives() -> list[ArchiveFormat]:
    return [fmt for fmt in formats().values() if isinstance(fmt, ArchiveFormat)]


def test_each_file_is_a_part_of_one_shard_of_one_format():
    for fmt in _archives():
        for part in fmt.parts:
            shard = "shard-1-of-4-0a1b2c3d-000007"
            found = part_of(part.name(shard))
            assert (found.fmt, found.part, found.shard) == (fmt, part, shard)
    for name in ["x.zip", ".hidden", "a.b.tar", "a#b.tar", ".tar", "tar"]:
        assert part_of(name) is None, name


def test_parts_that_could_name_one_file_are_found():
    assert _overlap(Part("", ".tar"), Part("", ".tar"))
    assert _overlap(Part("a", ".tar"), Part("ab", ".tar"))  # "abX.tar": shard "bX" or "X"
    assert _overlap(Part("", ".x.tar"), Part("p.", ".tar"))  # "p.x.tar": shard "p" or "x"
    assert _overlap(Part("", ".tar"), Part("", ".b.tar")) is False  # a shard holds no dot
    assert not _overlap(Part("", ".tar"), Part("recording.", ".tar"))
    assert not _overlap(Part("cuts.", ".jsonl.gz"), Part("", ".parquet"))


def _package(tmp_path, monkeypatch, package: str, modules: dict[str, str]) -> str:
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name, text in modules.items():
        (root / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return package


DECLARE = """
from qtts.core.jobs.output.stores.formats.webdataset import FORMAT as WDS
from dataclasses import replace
from qtts.core.jobs.output.stores.archive import Part
FORMAT = replace(WDS, name={name!r}, parts=(Part({head!r}, ".tar"),))
"""


def test_a_module_breaking_a_rule_stops_the_registry(tmp_path, monkeypatch):
    no_format = _package(tmp_path, monkeypatch, "formats_a", {"helper": "X = 1\n"})
    with pytest.raises(FormatError, match="declares no FORMAT"):
        registry.discover(no_format)
    clash = {"one": DECLARE.format(name="one", head="a"),
             "two": DECLARE.format(name="two", head="ab")}  # fmt: skip
    with pytest.raises(FormatError, match="could name one file"):
        registry.discover(_package(tmp_path, monkeypatch, "formats_b", clash))
    twice = {"one": DECLARE.format(name="x", head="a."), "two": DECLARE.format(name="x", head="b.")}
    with pytest.raises(FormatError, match="two output layouts are named 'x'"):
        registry.discover(_package(tmp_path, monkeypatch, "formats_c", twice))
    fine = {"_shared": "", "one": DECLARE.format(name="x", head="a.")}
    assert list(registry.discover(_package(tmp_path, monkeypatch, "formats_d", fine))) == ["x"]


def test_an_unknown_layout_or_location_is_an_error(tmp_path):
    with pytest.raises(UsageError, match="--output must be one of files, "):
        StoreSpec(layout="zip")
    spec = JobSpec("batch", str(tmp_path / "absent.csv"), OutputOptions(tmp_path, layout="zip"))
    with pytest.raises(UsageError, match="--output must be one of files, "):  # before any row
        prepare_job(spec, open_text_model=None, env={})
    with pytest.raises(FatalError, match="no output format qtts knows"):
        layouts(pa.array(["a.wav", "data/w-000000.zip#a.wav"]))
    with pytest.raises(FatalError, match="no output format writes"):
        holder(tmp_path, "data/w-000000.zip")
    assert holder(tmp_path, "a.wav") is formats()["files"]
    assert holder(tmp_path, "data/w-000000.tar") is formats()["webdataset"]


def test_the_help_reads_the_formats_without_pyarrow_or_numpy():
    code = (
        "import sys\nimport qtts.cli.app\n"
        "from qtts.core.jobs.output.stores.registry import formats, layouts_help\n"
        "assert formats() and layouts_help()\n"
        "print('pyarrow' in sys.modules, 'numpy' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]
