"""The output layouts, found in stores/formats/ (each module there not starting with `_` declares
one as `FORMAT`) and read once through importlib; everything else asks here (docs/architecture.md,
"Adding a layout"). A file two formats could claim, two layouts of one name or a container no layout
holds are errors: nothing is read as some default format. Standard library only at import. Knows
which layouts exist; nothing of any one.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from qtts.core.errors import FatalError, UsageError
from qtts.core.jobs.contract.choices import Choice
from qtts.core.jobs.output.stores.archive import ArchiveFormat
from qtts.core.jobs.output.stores.layout import Layout
from qtts.core.jobs.output.stores.shard_files import SHARD_NAME_NEVER, Part

FORMATS_PACKAGE = "qtts.core.jobs.output.stores.formats"


class FormatError(RuntimeError):
    """The formats folder holds a module that breaks the registry's rules."""


@cache
def formats() -> dict[str, Layout]:
    """Every layout by name: the default first, then in module name order."""
    found = discover(FORMATS_PACKAGE)
    defaults = [fmt for fmt in found.values() if fmt.default]
    if len(defaults) != 1:
        raise FormatError(f"{len(defaults)} layouts say they are the default, not one")
    return {defaults[0].name: defaults[0], **found}


def discover(package_name: str) -> dict[str, Layout]:
    """The layouts the modules of a package declare (FormatError where one breaks a rule)."""
    package = importlib.import_module(package_name)
    found: dict[str, Layout] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package_name}.{info.name}")
        fmt = getattr(module, "FORMAT", None)
        if not isinstance(fmt, Layout):
            raise FormatError(f"{module.__name__} declares no FORMAT (a Layout)")
        if fmt.name in found:
            raise FormatError(f"two output layouts are named {fmt.name!r}")
        if isinstance(fmt, ArchiveFormat):
            _check_parts(fmt, [f for f in found.values() if isinstance(f, ArchiveFormat)])
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
    return tuple(formats())


def layouts_help() -> str:
    """--output's help: each layout and what it writes."""
    return (
        "How the audio lands. " + "; ".join(f"{f.name}: {f.help}" for f in formats().values()) + "."
    )


def find(name: str) -> Layout:
    """The layout of an --output value (UsageError for one that is none)."""
    try:
        return formats()[name]
    except KeyError:
        raise UsageError(
            f"--output must be one of {', '.join(layout_names())}, got {name!r}"
        ) from None


def default_layout() -> Layout:
    """--output on a new out dir when none is given."""
    return next(iter(formats().values()))


def holder(out_dir: Path, container: str) -> Layout:
    """The layout a location's container (relative to the out dir) is in. A container no layout
    holds is an error: it is never read, rewritten or removed as some other format."""
    for fmt in formats().values():
        if fmt.holds(container):
            return fmt
    raise FatalError(f"{out_dir / container}: no output format writes a shard of that name")


@dataclass(frozen=True)
class Found:
    fmt: ArchiveFormat
    part: Part
    shard: str  # the shard's name


def part_of(file_name: str) -> Found | None:
    """Which format, part and shard a file name in OUT/data/ is (None: no format's)."""
    for fmt in formats().values():
        for part in fmt.parts if isinstance(fmt, ArchiveFormat) else ():
            if (shard := part.shard_of(file_name)) is not None:
                return Found(fmt, part, shard)
    return None


def read_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged shard of any format raises, besides OSError."""
    return tuple({e for fmt in formats().values() for e in fmt.read_errors()})


def _output_layout() -> type[Choice]:
    names = layout_names()
    return Choice("OutputLayout", [(n, n) for n in names], module=__name__, qualname="OutputLayout")


OutputLayout = _output_layout()  # the --output choices: each layout, as typed
