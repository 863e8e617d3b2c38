"""Reference audio and voice files by content: each file's sha256, cached in .qtts/refs.json by
path, size and mtime so an unchanged file is not read again. Knows one JSON file and the bytes."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from pathlib import Path

from qtts.core.jobs.state.atomic_files import atomic_write_bytes
from qtts.core.jobs.state.paths import StatePaths


class RefDigests:
    """sha256 of reference clips, cached by (path, size, mtime) across runs."""

    def __init__(self, out_dir: Path) -> None:
        self.path = StatePaths(out_dir).refs_file
        try:
            self.cache: dict[str, list] = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError):
            self.cache = {}
        self.changed = False

    def digest(self, path: str) -> str:
        st = os.stat(path)
        hit = self.cache.get(path)
        if hit and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return hit[2]
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        value = h.hexdigest()[:32]
        self.cache[path] = [st.st_size, st.st_mtime_ns, value]
        self.changed = True
        return value

    def save(self) -> None:
        """Best effort: a lost cache costs a re-read, never a wrong answer."""
        if self.changed and self.path.parent.is_dir():
            with suppress(OSError):
                atomic_write_bytes(self.path, json.dumps(self.cache).encode())
