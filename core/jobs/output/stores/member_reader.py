"""Reading one row's audio back by its location, for `qtts score`: a plain file by its path, an
archive member from its shard. A shard's index (member -> byte range in a tar; id -> row group in
a Parquet shard) is built once, on first use, keyed by the shard's size and mtime (a shard
rewritten meanwhile is indexed again); a Parquet row group's audio column is kept for the next
rows. Shard members sit in the order rows finished, not the input's, so a reader of many rows
takes them in `order()` (shard by shard, each front to back): then each row group is read once.
Thread-safe: the scorers read on a pool, and one thread reads a row group while the others wait
for it. Knows locations and shard formats; no models."""

from __future__ import annotations

import io
import tarfile
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from qtts.core.jobs.output.stores.locations import split_location

KEPT_GROUPS = 4  # Parquet row groups kept decoded (64 rows each)


class MemberReader:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._tars: dict[tuple, dict[str, tuple[int, int]]] = {}
        self._parquets: dict[tuple, dict[str, tuple[int, int]]] = {}
        self._groups: OrderedDict[tuple, list] = OrderedDict()

    def source(self, location: str):
        """What soundfile can read: the file's path, or a callable giving the member's bytes."""
        container, member = split_location(location)
        path = self.root / container
        if member is None:
            return path
        return lambda: io.BytesIO(self.read(path, member))

    def order(self, locations: list[str]) -> np.ndarray:
        """The indices of `locations` in reading order: plain files first as given, then each
        shard's members front to back."""
        keys = []
        for k, location in enumerate(locations):
            container, member = split_location(location)
            if member is None:
                keys.append(("", 0, 0, k))
                continue
            path = self.root / container
            try:
                index = (
                    self._tar_index(path) if path.suffix == ".tar" else self._parquet_index(path)
                )
                at = index.get(member, (0, 0))
            except OSError:  # a missing shard: its rows fail alone when read
                at = (0, 0)
            keys.append((container, *at, k))
        return np.array([key[-1] for key in sorted(keys)], dtype=np.int64)

    def read(self, path: Path, member: str) -> bytes:
        if path.suffix == ".tar":
            start, size = self._tar_index(path)[member]
            with open(path, "rb") as f:
                f.seek(start)
                return f.read(size)
        group, row = self._parquet_index(path)[member]
        return self._group_audio(path, group)[row]["bytes"]

    def _tar_index(self, path: Path) -> dict[str, tuple[int, int]]:
        key = _identity(path)
        with self._lock:
            if key not in self._tars:
                with tarfile.open(path, mode="r") as tar:
                    self._tars[key] = {i.name: (i.offset_data, i.size) for i in tar}
            return self._tars[key]

    def _parquet_index(self, path: Path) -> dict[str, tuple[int, int]]:
        key = _identity(path)
        with self._lock:
            if key not in self._parquets:
                source = pq.ParquetFile(path)
                index = {}
                for g in range(source.num_row_groups):
                    ids = source.read_row_group(g, columns=["id"])["id"].to_pylist()
                    index.update((row_id, (g, k)) for k, row_id in enumerate(ids))
                self._parquets[key] = index
            return self._parquets[key]

    def _group_audio(self, path: Path, group: int) -> list:
        key = (_identity(path), group)
        with self._lock:  # held while reading: a group is read once, not by every waiting thread
            if key not in self._groups:
                source = pq.ParquetFile(path)
                self._groups[key] = source.read_row_group(group, columns=["audio"])[
                    "audio"
                ].to_pylist()
                while len(self._groups) > KEPT_GROUPS:
                    self._groups.popitem(last=False)
            self._groups.move_to_end(key)
            return self._groups[key]


def _identity(path: Path) -> tuple[Path, int, int]:
    st = path.stat()
    return (path, st.st_size, st.st_mtime_ns)
