"""A row's audio read back by its location for `qtts score`: a file by its path, a member through
its layout's MemberSource (a shard's index built once, again when its size or mtime changes; decoded
blocks shared by every source, the last KEPT_BLOCKS). Many rows read in `order()` read each block
once. Thread-safe. Knows locations; the layouts are the registry's.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.output.stores.archive import MemberSource
from qtts.core.jobs.output.stores.presence import is_archived, split_location
from qtts.core.jobs.output.stores.registry import holder

KEPT_BLOCKS = 4  # decoded blocks kept (a Parquet row group: 64 rows)


class KeptBlocks:
    """The last few decoded blocks of any shard, loaded once (archive.KeptBlocks)."""

    def __init__(self, size: int = KEPT_BLOCKS) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._blocks: OrderedDict[tuple, object] = OrderedDict()

    def get(self, key: tuple, load: Callable[[], object]) -> object:
        with self._lock:  # held while loading: a block is read once, not by every waiting thread
            if key not in self._blocks:
                self._blocks[key] = load()
                while len(self._blocks) > self.size:
                    self._blocks.popitem(last=False)
            self._blocks.move_to_end(key)
            return self._blocks[key]


class MemberReader:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._sources: dict[tuple, MemberSource] = {}
        self._kept = KeptBlocks()

    def source(self, location: str):
        """What soundfile can read: the file's path, or a callable giving the member's bytes."""
        container, member = split_location(location)
        if member is None:
            return self.root / container
        return lambda: io.BytesIO(self._member_source(container).read(member))

    def order(self, locations: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The indices of `locations` in reading order: files of their own first as given, then
        each shard's members front to back (all files of their own: as given, nothing read)."""
        if not pc.any(pc.fill_null(is_archived(locations), False)).as_py():
            return np.arange(len(locations))
        keys = []
        for k, location in enumerate(locations.to_pylist()):
            container, member = split_location(location)
            if member is None:
                keys.append(("", 0, 0, k))
                continue
            try:
                at = self._member_source(container).position(member)
            except OSError:  # a missing shard: its rows fail alone when read
                at = (0, 0)
            keys.append((container, *at, k))
        return np.array([key[-1] for key in sorted(keys)], dtype=np.int64)

    def _member_source(self, container: str) -> MemberSource:
        st = (self.root / container).stat()
        key = (container, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key not in self._sources:
                fmt = holder(self.root, container)
                self._sources[key] = fmt.audio_source(self.root, container, self._kept)
            return self._sources[key]
