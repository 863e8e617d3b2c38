"""The `quality` extra: what `qtts score` needs beyond the base install, and the one-line error
that names the install command when it is missing. Knows package names only."""

from __future__ import annotations

import importlib

from qtts.core.errors import UsageError

INSTALL = 'pip install "qtts[quality]"'
# What each scorer imports from the extra (speechmos imports librosa without declaring it).
DNSMOS_MODULES = ("speechmos", "onnxruntime", "librosa")
ASR_MODULES = ("jiwer",)


def require(modules: tuple[str, ...]) -> None:
    """Import each module, or refuse the command (exit 2) naming the extra."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UsageError(
                f"qtts score needs the quality extra ({name} is missing: {exc.msg}); "
                f"install it with: {INSTALL}"
            ) from None
