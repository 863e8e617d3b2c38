"""The `quality` extra: what `qtts score` needs beyond the base install, and the one-line error
that names the install command when it is missing. Knows package names only."""

from __future__ import annotations

import importlib
import importlib.util

from qtts.core.errors import UsageError

# From an index, and from a clone of the repository (the README's install)
INSTALL = 'pip install "qtts[quality]" (from a clone: pip install -e ".[quality]")'
# What each scorer imports from the extra (speechmos imports librosa without declaring it).
DNSMOS_MODULES = ("speechmos", "onnxruntime", "librosa")
ASR_MODULES = ("jiwer",)
# Speaker similarity's default model: resemblyzer's wheel (its weights, found without importing
# it: qtts.core.quality.ge2e), the WebRTC VAD's C extension, librosa's mel and scipy.
RESEMBLYZER_MODULES = ("resemblyzer", "_webrtcvad", "librosa", "scipy.ndimage")

# Looked for, never imported: resemblyzer's __init__ imports webrtcvad, which needs setuptools'
# pkg_resources (gone from setuptools 81).
FOUND_NOT_IMPORTED = ("resemblyzer",)


def require(modules: tuple[str, ...]) -> None:
    """Import each module, or refuse the command (exit 2) naming the extra."""
    for name in modules:
        try:
            if name in FOUND_NOT_IMPORTED:
                if importlib.util.find_spec(name) is None:
                    raise ImportError(f"No module named {name!r}")
            else:
                importlib.import_module(name)
        except ImportError as exc:
            raise UsageError(
                f"qtts score needs the quality extra ({name} is missing: {exc.msg}); "
                f"install it with: {INSTALL}"
            ) from None
