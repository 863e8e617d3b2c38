"""The speaker embeddings `qtts score` keeps between passes, so that `speaker_sim_centroid` (a row
against the mean of its voice's rows) can be computed again over every row without embedding
each clip again, and a pass resumes where the last one stopped.

FOLDER/<digest of the scorer identity>/part-*.parquet, each part the rows embedded since the last
save: the row's key, its stamp (the audio it was made from: qtts.core.quality.scores) and its
vector as float16 bytes. Opening the store keeps only the entries whose key and stamp are still
the dataset's (a redone row's old vector goes), the latest per key, folded into one part; another
identity's folder is removed (scores.parquet holds one speaker scorer's values at a time). Memory
while the centroids are computed: 2 bytes x dims per row (256 dims for resemblyzer: 512 MB at a
million rows). Knows Arrow files; no models, no audio.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qtts.core.jobs.state.atomic_files import atomic_write

IDENTITY_FILE = "identity.txt"


class EmbeddingStore:
    def __init__(self, folder: Path, identity: str) -> None:
        self.root = folder
        self.folder = folder / hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.identity = identity
        self._keys: list[str] = []
        self._stamps: list[str] = []
        self._vectors: list[np.ndarray] = []

    def open(self, keys: pa.Array, stamps: pa.Array, *, fresh: bool = False) -> np.ndarray:
        """Fold the parts into one of the entries still current; bool [rows]: each dataset row
        (keys, stamps) has a vector. fresh: forget every stored vector (--overwrite)."""
        if self.root.is_dir():
            for other in self.root.iterdir():
                if other != self.folder or fresh:
                    shutil.rmtree(other, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / IDENTITY_FILE).write_text(self.identity + "\n", encoding="utf-8")
        old = sorted(self.folder.glob("part-*.parquet"))
        table = self._current(old, keys, stamps)
        if len(old) > 1 or (old and pq.read_metadata(old[0]).num_rows != table.num_rows):
            if table.num_rows:
                self._write(table)  # before the old ones go: a kill between loses nothing
            for path in old:
                path.unlink(missing_ok=True)
        have = pc.is_in(keys, value_set=table["key"]) if table.num_rows else None
        return np.zeros(len(keys), bool) if have is None else have.to_numpy(zero_copy_only=False)

    def add(self, key: str, stamp: str, vector: np.ndarray) -> None:
        self._keys.append(key)
        self._stamps.append(stamp)
        self._vectors.append(np.asarray(vector, dtype=np.float16))

    def flush(self) -> None:
        """The vectors added since the last flush, as a new part."""
        if not self._keys:
            return
        vectors = np.stack(self._vectors)
        self._write(_table(self._keys, self._stamps, vectors))
        self._keys, self._stamps, self._vectors = [], [], []

    def matrix(self, keys: pa.Array, stamps: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(bool [rows]: a current vector is stored, float32 [rows, dims]: it, zeros where not)."""
        table = self._current(sorted(self.folder.glob("part-*.parquet")), keys, stamps)
        have = np.zeros(len(keys), dtype=bool)
        if not table.num_rows:
            return have, np.zeros((len(keys), 0), dtype=np.float32)
        at = pc.index_in(keys, value_set=table["key"])
        have = pc.is_valid(at).to_numpy(zero_copy_only=False)
        raw = _vectors(table["vector"])
        out = np.zeros((len(keys), raw.shape[1]), dtype=np.float32)
        out[have] = raw[pc.drop_null(at).to_numpy()]
        return have, out

    def _current(self, parts: list[Path], keys: pa.Array, stamps: pa.Array) -> pa.Table:
        """The parts' entries, the latest per key, whose key and stamp are a dataset row's."""
        tables = [pq.read_table(p) for p in parts]
        if not tables:
            return _table([], [], np.zeros((0, 0), np.float16))
        table = pa.concat_tables(tables).combine_chunks()
        table = table.take(pa.array(np.arange(table.num_rows)[::-1]))  # latest first
        first = pc.index_in(table["key"], value_set=table["key"])  # each key's latest row
        table = table.filter(pc.equal(first, pa.array(np.arange(table.num_rows))))
        at = pc.index_in(table["key"], value_set=keys)
        same = pc.fill_null(pc.equal(stamps.take(at), table["stamp"]), False)
        return table.filter(same)

    def _write(self, table: pa.Table) -> None:
        name = f"part-{time.time_ns():020d}.parquet"
        atomic_write(self.folder / name, lambda f: pq.write_table(table, f))


def _table(keys, stamps, vectors: np.ndarray) -> pa.Table:
    width = vectors.shape[1] * 2 if vectors.ndim == 2 else 0
    flat = pa.py_buffer(np.ascontiguousarray(vectors, dtype=np.float16).tobytes())
    column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(keys), [None, flat])
    return pa.table(
        {
            "key": pa.array(keys, pa.string()),
            "stamp": pa.array(stamps, pa.string()),
            "vector": column,
        }
    )


def _vectors(column: pa.ChunkedArray) -> np.ndarray:
    """float32 [rows, dims] from a column of float16 bytes."""
    array = column.combine_chunks()
    width = array.type.byte_width
    data = np.frombuffer(array.buffers()[1], dtype=np.uint8)
    data = data[array.offset * width : (array.offset + len(array)) * width]
    return data.view(np.float16).reshape(len(array), width // 2).astype(np.float32)
