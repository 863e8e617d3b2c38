"""The output layouts: `files` (a file per row, stores/files.py) and every archive format, found by
looking in stores/formats/: each module there (its name not starting with `_`) is one format and
declares it as `FORMAT` (shard_format.ArchiveFormat). Adding a format is adding its module;
everything else asks here: the --output choices and help (OutputLayout, layouts_help), which
format and shard a file in OUT/data/ belongs to (part_of), the pattern of each format's
locations (locations.layouts), the read errors a repack expects.

Formats are read once, on first use, through importlib: a format imports the contract
(shard_format.py), never this module, and no module here names a format. A file that two
formats could claim, a part that is not a file name, or two formats of one name stop the import
(FormatError): an unknown file is never read as some default format.
Standard library only at import (the format modules too): `qtts --help` builds --output from it.
Knows which formats exist; nothing of any one.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.choices import Choice
from qtts.core.jobs.output.stores.shard_format import SHARD_NAME_NEVER, ArchiveFormat, Part

FILES = "files"
FILES_HELP = "OUT/{id}.wav per row, with metadata.jsonl"
FORMATS_PACKAGE = "qtts.core.jobs.output.stores.formats"


class FormatError(RuntimeError):
    """The formats folder holds a module that breaks the registry's rules."""


@cache
def archive_formats() -> dict[str, ArchiveFormat]:
    """Every archive format by name, in module name order."""
    return discover(FORMATS_PACKAGE)


def discover(package_name: str) -> dict[str, ArchiveFormat]:
    """The formats the modules of a package declare (FormatError where one breaks a rule)."""
    package = importlib.import_module(package_name)
    found: dict[str, ArchiveFormat] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package_name}.{info.name}")
        fmt = getattr(module, "FORMAT", None)
        if not isinstance(fmt, ArchiveFormat):
            raise FormatError(f"{module.__name__} declares no FORMAT (an ArchiveFormat)")
        if fmt.name in found or fmt.name == FILES:
            raise FormatError(f"two output layouts are named {fmt.name!r}")
        _check_parts(fmt, found.values())
        found[fmt.name] = fmt
    return found


def _check_parts(fmt: ArchiveFormat, others: Iterable[ArchiveFormat]) -> None:
    if not fmt.parts:
        raise FormatError(f"format {fmt.name!r} has no parts")
    for part in fmt.parts:
        if "/" in part.head + part.tail or not part.tail.startswith("."):
            raise FormatError(f"format {fmt.name!r}: a part is named {part.name('{shard}')!r}")
        for other in [p for o in others for p in o.parts] + [p for p in fmt.parts if p != part]:
            if _overlap(part, other):
                raise FormatError(
                    f"format {fmt.name!r}: {part.name('S')!r} and {other.name('S')!r} could name "
                    "one file"
                )


def _overlap(a: Part, b: Part) -> bool:
    """Whether some file is a part of both: head_a + s + tail_a == head_b + t + tail_b for
    shard names s and t (non-empty, no dot)."""
    for p, q in ((a, b), (b, a)):
        if not q.head.startswith(p.head):
            continue
        x = q.head[len(p.head) :]  # s + tail_p == x + t + tail_q
        if q.tail.endswith(p.tail):  # s == x + t + y
            y = q.tail[: len(q.tail) - len(p.tail)]
            if _shard_like(x + "t" + y):
                return True
        elif p.tail.endswith(q.tail):  # s + y == x + t, y starting with a dot
            y = p.tail[: len(p.tail) - len(q.tail)]
            for k in range(1, len(y) + 1):  # t, dot-free, can only be y's last k characters
                s = x[: len(x) - len(y) + k] if x.endswith(y[: len(y) - k]) else ""
                if _shard_like(y[-k:]) and _shard_like(s):
                    return True
    return False


def _shard_like(text: str) -> bool:
    return bool(text) and not any(c in text for c in SHARD_NAME_NEVER + "/")


def layout_names() -> tuple[str, ...]:
    return (FILES, *archive_formats())


def layouts_help() -> str:
    """--output's help: each layout and what it writes."""
    lines = [f"{FILES}: {FILES_HELP}", *(f"{f.name}: {f.help}" for f in archive_formats().values())]
    return "How the audio lands. " + "; ".join(lines) + "."


def archive_format(name: str) -> ArchiveFormat:
    """The archive format of an --output value (UsageError for one that is none)."""
    try:
        return archive_formats()[name]
    except KeyError:
        raise UsageError(_unknown(name)) from None


def check_layout(name: str) -> str:
    if name != FILES and name not in archive_formats():
        raise UsageError(_unknown(name))
    return name


def _unknown(name: str) -> str:
    return f"--output must be one of {', '.join(layout_names())}, got {name!r}"


@dataclass(frozen=True)
class Found:
    fmt: ArchiveFormat
    part: Part
    shard: str  # the shard's name

    @property
    def is_key(self) -> bool:
        return self.part == self.fmt.key


def part_of(file_name: str) -> Found | None:
    """Which format, part and shard a file name in OUT/data/ is (None: no format's)."""
    for fmt in archive_formats().values():
        for part in fmt.parts:
            if (shard := part.shard_of(file_name)) is not None:
                return Found(fmt, part, shard)
    return None


def read_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged shard of any format raises, besides OSError."""
    return tuple({e for fmt in archive_formats().values() for e in fmt.read_errors()})


def _output_layout() -> type[Choice]:
    names = layout_names()
    return Choice("OutputLayout", [(n, n) for n in names], module=__name__, qualname="OutputLayout")


OutputLayout = _output_layout()  # the --output choices: files and each format, as typed
