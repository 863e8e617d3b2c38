"""The files layout: one `{id}.wav|flac` per row at the top of the out dir (and `{id}.codes.npy`
with --save-codes), each written atomically (core/jobs/state/atomic_files.py) on a small thread
pool.

The row's record is journalled once its audio is durable in the temp file, just before the
rename, so a published file always has its record. A redone row's old files go just before its
new record: its old audio, and what this run does not make (another format's audio, codes
without --save-codes); all of them when the row fails now. A kill between the record and the
rename leaves no file, never an old one passing for the new, and a kill after it never leaves
two copies of one row. metadata.jsonl goes before the first redone row replaces its file
(drop_audiofolder_view). Each part of a row's writing is timed on its clock
(core/jobs/output/writer_clock.py).
Knows file names; no records beyond building them.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from qtts.core.jobs.output.stores.base import RowOutput
from qtts.core.jobs.output.stores.locations import FILES
from qtts.core.jobs.output.writer import AUDIO_FORMATS, encode_audio, encode_codes, write_error
from qtts.core.jobs.output.writer_clock import WriterClock
from qtts.core.jobs.state.atomic_files import atomic_write_bytes, fsync_dir, unlink_quietly
from qtts.core.jobs.state.journal import Journal

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


def drop_audiofolder_view(out_dir: Path) -> None:
    """metadata.jsonl out, durably, before any plain file it lists goes: the run's end (or, after
    a kill, the next run's) rebuilds it, and an AudioFolder loader fails on a file gone."""
    unlink_quietly(out_dir / METADATA_NAME)
    fsync_dir(out_dir)


def remove_row_files(out_dir: Path, row_id: str) -> None:
    """A redone row that fails is replaced by nothing: its old audio (any format) and codes go
    before its failed record, or a loader handed the folder would take them as its."""
    for name in [*(audio_name(row_id, f) for f in AUDIO_FORMATS), codes_name(row_id)]:
        unlink_quietly(out_dir / name)


def audio_name(row_id: str, audio_format: str) -> str:
    return f"{row_id}.{audio_format}"


def codes_name(row_id: str) -> str:
    return f"{row_id}{CODES_SUFFIX}"


def row_id_of(final: str) -> str | None:
    """The row id of an output file name (`{id}.wav`, `{id}.flac`, `{id}.codes.npy`), else
    None (results.parquet, metadata.jsonl, journals, the job file)."""
    for suffix in (CODES_SUFFIX, *(f".{fmt}" for fmt in AUDIO_FORMATS)):
        if final.endswith(suffix) and len(final) > len(suffix):
            return final[: -len(suffix)]
    return None


class FilesStore:
    layout = FILES

    def __init__(
        self,
        out_dir: Path,
        journal: Journal,
        audio_format: str,
        save_codes: bool,
        workers: int = 2,
        *,
        clock: WriterClock | None = None,
    ) -> None:
        if audio_format not in AUDIO_FORMATS:
            raise ValueError(f"unknown audio format {audio_format!r}; choose wav or flac")
        self.out_dir, self.journal = out_dir, journal
        self.audio_format, self.save_codes = audio_format, save_codes
        self.clock = clock or WriterClock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qtts-writer")

    def submit(self, row: RowOutput) -> Future[None]:
        return self._pool.submit(self.write, row)

    def write(self, row: RowOutput) -> None:
        """One row's files, now (codes first, audio last: resume checks the audio)."""
        path = self.out_dir / audio_name(row.id, self.audio_format)
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
        remove_row_files(self.out_dir, row_id)

    def _stale(self, row_id: str) -> list[str]:
        others = [audio_name(row_id, f) for f in AUDIO_FORMATS if f != self.audio_format]
        return [*others, *([] if self.save_codes else [codes_name(row_id)])]

    def published(self, ids: list[str], since: float) -> dict[str, float]:
        import soundfile as sf

        done = {}
        for row_id in ids:
            path = self.out_dir / audio_name(row_id, self.audio_format)
            try:
                if path.stat().st_mtime >= since:
                    done[row_id] = float(sf.info(str(path)).duration)
            except (OSError, RuntimeError):
                continue
        return done

    def close(self, *, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
