"""--output files: one `{id}.wav|flac` per row at the top of the out dir (`{id}.codes.npy` with
--save-codes), each written atomically on a small thread pool, listed by metadata.jsonl (an
AudioFolder). A row's record is journalled once its audio is durable in its temp file, just
before the rename; a redone row's file is replaced by name. Standard library only at import.
Knows file names; no records beyond building them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qtts.core.jobs.contract.choices import AudioFormat
from qtts.core.jobs.output.stores.layout import Layout, RepackTarget, RowOutput, Sample
from qtts.core.jobs.output.stores.layout import repack_temp as _repack_temp
from qtts.core.jobs.output.writer import WriterClock
from qtts.core.jobs.state.atomic_files import atomic_write_bytes, fsync_dir, unlink_quietly

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from qtts.core.jobs.output.stores.layout import Listing, StoreOptions
    from qtts.core.jobs.state.journal import Journal

AUDIO_SUFFIXES = tuple(f".{f.value}" for f in AudioFormat)
CODES_SUFFIX = ".codes.npy"
METADATA_NAME = "metadata.jsonl"  # the layout's view (an AudioFolder), rebuilt by results.py
# metadata.jsonl's keys from results.parquet's columns (the Hub's AudioFolder reads file_name)
METADATA_KEYS = {
    "file_name": "file_name",
    "id": "id",
    "text": "text",
    "speaker": "speaker",
    "language": "language",
    "duration_s": "duration",
}
FILES_BATCH = 1000  # repacked files committed at once
SLICE = 1 << 20  # rows whose expected names are built at once


def codes_name(row_id: str) -> str:
    return f"{row_id}{CODES_SUFFIX}"


def row_id_of(final: str) -> str | None:
    """The row id of an output file name (`{id}.wav`, `{id}.flac`, `{id}.codes.npy`), else
    None (results.parquet, metadata.jsonl, journals, the job file)."""
    for suffix in (CODES_SUFFIX, *AUDIO_SUFFIXES):
        if final.endswith(suffix) and len(final) > len(suffix) and "/" not in final:
            return final[: -len(suffix)]
    return None


class FilesLayout(Layout):
    name = "files"
    help = "OUT/{id}.wav per row, with metadata.jsonl"
    default = True
    replaces_by_name = True
    codes_stay = True
    codes_missing = "codes file missing (--save-codes writes {id}.codes.npy)"

    def open(self, out_dir: Path, journal: Journal, spec: StoreOptions, *, writer: str,
             workers: int, clock: WriterClock | None) -> FilesStore:  # fmt: skip
        return FilesStore(out_dir, journal, spec.audio_format, spec.save_codes, workers,
                          clock=clock)  # fmt: skip

    def repack_target(self, out_dir: Path, spec: StoreOptions, writer: str) -> FilesTarget:
        return FilesTarget(out_dir, spec)

    def unlist(self, out_dir: Path) -> None:
        """An AudioFolder loader fails on a file gone that metadata.jsonl lists."""
        unlink_quietly(out_dir / METADATA_NAME)
        fsync_dir(out_dir)

    def remove_row(self, out_dir: Path, row_id: str) -> None:
        """A redone row that fails is replaced by nothing: its old audio (any format) and codes go
        before its failed record, or a loader handed the folder would take them as its."""
        for name in [*(f"{row_id}{s}" for s in AUDIO_SUFFIXES), codes_name(row_id)]:
            unlink_quietly(out_dir / name)

    def holds(self, container: str) -> bool:
        return "/" not in container  # a row's file, at the top (ids hold no "/")

    def claims(self, locations: pa.Array) -> np.ndarray:
        import pyarrow.compute as pc

        from qtts.core.jobs.state.records import as_bools

        return as_bools(pc.invert(pc.match_substring(locations, "/")))

    def as_written(self, ids: pa.Array, locations: pa.Array, audio_format: str) -> np.ndarray:
        """`{id}.{format}`, built a slice at a time: not ten million names at once."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from qtts.core.jobs.state.records import as_bools

        suffix = pa.scalar(audio_format)
        same = [
            as_bools(pc.equal(locations.slice(start, SLICE),
                              pc.binary_join_element_wise(ids.slice(start, SLICE), suffix, ".")))
            for start in range(0, max(len(ids), 1), SLICE)
        ]  # fmt: skip
        return np.concatenate(same)[: len(ids)]

    def codes_held(self, ids: pa.Array, codes_saved: pa.Array, listing: Listing) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.compute as pc

        from qtts.core.jobs.state.records import as_bools

        names = pc.binary_join_element_wise(ids, pa.scalar(CODES_SUFFIX), "")
        return as_bools(pc.is_in(names, value_set=listing.names()))

    def owns_temp(self, final: str, prefix: str, owns_row: Callable[[str], bool]) -> bool:
        row_id = row_id_of(final)
        return row_id is not None and owns_row(row_id)

    def take_out(self, out_dir: Path, container: str, ids: list[str], *,
                 keep_codes: bool) -> None:  # fmt: skip
        unlink_quietly(out_dir / container)
        for row_id in ids if not keep_codes else ():
            unlink_quietly(out_dir / codes_name(row_id))

    def read_back(self, out_dir: Path, container: str, ids: list[str], *,
                  with_codes: bool) -> Iterator[Sample]:  # fmt: skip
        row_id = ids[0]  # a file holds one row
        codes = (out_dir / codes_name(row_id)).read_bytes() if with_codes else None
        yield row_id, (out_dir / container).read_bytes(), codes

    def name_temps(self, out_dir: Path, container: str) -> bool:
        """Its codes first (when the repack wrote them), then its audio."""
        row_id = row_id_of(container)
        for final in ([codes_name(row_id)] if row_id is not None else []) + [container]:
            with suppress(FileNotFoundError):
                os.replace(_repack_temp(out_dir / final), out_dir / final)
        return (out_dir / container).exists()

    def audio_source(self, out_dir: Path, container: str, kept: Any) -> None:
        return None  # the file itself


FORMAT = FilesLayout()


class FilesStore:
    def __init__(self, out_dir: Path, journal: Journal, audio_format: str, save_codes: bool,
                 workers: int = 2, *, clock: WriterClock | None = None) -> None:  # fmt: skip
        if f".{audio_format}" not in AUDIO_SUFFIXES:  # refused before any codes are written
            raise ValueError(f"unknown audio format {audio_format!r}; choose wav or flac")
        self.out_dir, self.journal = out_dir, journal
        self.audio_format, self.save_codes = audio_format, save_codes
        self.clock = clock or WriterClock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qtts-writer")

    def submit(self, row: RowOutput) -> Future[None]:
        return self._pool.submit(self.write, row)

    def write(self, row: RowOutput) -> None:
        """One row's files, now (codes first, audio last: resume checks the audio)."""
        from qtts.core.jobs.output.writer import encode_audio, encode_codes, write_error

        path = self.out_dir / f"{row.id}.{self.audio_format}"
        part = self.clock.part
        try:
            with part("finish"):
                row = row.finished()
            if self.save_codes and row.codes is not None:
                with part("encode"):
                    codes = encode_codes(row.codes)
                with part("write"):
                    atomic_write_bytes(self.out_dir / codes_name(row.id), codes)
            with part("encode"):
                data = encode_audio(row.audio, row.sample_rate, self.audio_format)

            def journal() -> None:  # the audio is durable in its temp file
                with part("measures"):
                    record = row.record(path.name, len(data), self.save_codes)
                with part("journal"):
                    # A redone row's old audio (and another format's, and codes no longer
                    # saved) go before its new line: once that line is durable the row is done,
                    # and a kill must not leave a second copy that no rerun looks at again.
                    path.unlink(missing_ok=True)
                    for name in self._stale(row.id):
                        unlink_quietly(self.out_dir / name)
                    self.journal.append([record])

            with part("write"):  # the journal's parts are its own
                atomic_write_bytes(path, data, journal)
        except OSError as e:
            raise write_error(e, path) from e

    def remove_earlier_output(self, row_id: str) -> None:
        FORMAT.remove_row(self.out_dir, row_id)

    def _stale(self, row_id: str) -> list[str]:
        others = [f"{row_id}{s}" for s in AUDIO_SUFFIXES if s != f".{self.audio_format}"]
        return [*others, *([] if self.save_codes else [codes_name(row_id)])]

    def published(self, ids: list[str], since: float) -> dict[str, float]:
        import soundfile as sf

        done = {}
        for row_id in ids:
            path = self.out_dir / f"{row_id}.{self.audio_format}"
            try:
                if path.stat().st_mtime >= since:
                    done[row_id] = float(sf.info(str(path)).duration)
            except (OSError, RuntimeError):
                continue
        return done

    def close(self, *, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)


class FilesTarget(RepackTarget):
    """A repack into the files layout: a file per row (`{id}.codes.npy` too when the codes come
    out of a shard; a plain file's keep their name), committed a batch of rows at a time."""

    def add(self, record: dict, audio: bytes, codes: bytes | None, old_file: str) -> None:
        name = f"{record['id']}.{self.audio_format}"
        if codes is not None:
            self.write(self.out / codes_name(record["id"]), codes)
        self.write(self.out / name, audio)
        self.row(record, name, len(audio), old_file)

    def due(self) -> bool:
        return len(self.rows) >= FILES_BATCH

    def seal(self) -> list[dict]:
        if self.rows:
            fsync_dir(self.out)
        return self.sealed()
