"""What `qtts score PATH` scores: the rows of a qtts out dir or of any AudioFolder, as columns.

A qtts out dir (it has .qtts/job.json): every row whose latest record is ok and whose audio file
is there with its recorded size, from every shard's state and journals; keyed by `id`, stamped
with the record's time (a redone row gets a new record, so its old scores go stale).
An AudioFolder: PATH/metadata.jsonl with `file_name` (relative to PATH) and `text` per line, and
`language`, `speaker` and `ref_audio` (a reference clip, relative to PATH) when it has them;
keyed by `file_name`, stamped with the file's size and mtime (a replaced file goes stale; a
missing one fails alone).
Each row's `voice` names who speaks it, for speaker_sim_centroid: in an out dir the same speaker,
instruct and reference clip (by its content digest); in an AudioFolder its `speaker` (null
without one: no centroid). Knows out dirs (through the jobs layer's public functions) and
metadata files; no audio, no models.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import UsageError
from qtts.core.jobs.output.results import SCORES_NAME, record_stamps
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.model.hub import one_line

METADATA_NAME = "metadata.jsonl"
OUT_DIR, AUDIOFOLDER = "out_dir", "audiofolder"
FOLDER_LOCK = ".qtts-score.lock"  # an AudioFolder has no .qtts/ of its own
FOLDER_STATE = ".qtts-score"  # nor a folder for the speaker embeddings
# Read from each record of an out dir (merging needs id, status, run and t).
RECORD_COLUMNS = (
    "id",
    "row",
    "status",
    "file",
    "bytes",
    "duration_s",
    "text",
    "language",
    "speaker",
    "instruct",
    "ref_audio",
    "ref_digest",
    "run",
    "t",
)
SPEAKERS_DIR = "speaker-embeddings"  # the speaker scorer's vectors (qtts.core.quality.embeddings)


@dataclass(frozen=True)
class Dataset:
    root: Path
    kind: str  # OUT_DIR | AUDIOFOLDER
    # key, file_name, text, language, duration_s (null in an AudioFolder: not read until scored),
    # stamp (null: the file is missing), voice (null: unknown), ref_audio (a path, or null)
    rows: pa.Table

    @property
    def key(self) -> str:
        return "id" if self.kind == OUT_DIR else "file_name"

    @property
    def scores_path(self) -> Path:
        return self.root / SCORES_NAME

    @property
    def embeddings_dir(self) -> Path:
        hidden = StatePaths(self.root).dir if self.kind == OUT_DIR else self.root / FOLDER_STATE
        return hidden / SPEAKERS_DIR

    @property
    def lock_path(self) -> Path:
        return (
            StatePaths(self.root).dir / "score.lock"
            if self.kind == OUT_DIR
            else self.root / FOLDER_LOCK
        )


def open_dataset(path: Path) -> Dataset:
    """PATH as a qtts out dir or an AudioFolder; a usage error (exit 2) when it is neither."""
    if not path.is_dir():
        raise UsageError(f"{path} is not a folder: pass a qtts out dir or an AudioFolder")
    if StatePaths(path).job_file.is_file():
        return Dataset(path, OUT_DIR, _out_dir_rows(path))
    if (path / METADATA_NAME).is_file():
        return Dataset(path, AUDIOFOLDER, _folder_rows(path))
    raise UsageError(
        f"{path} holds neither a qtts job (.qtts/job.json) nor an AudioFolder "
        f"{METADATA_NAME} (lines with file_name and text)"
    )


def _out_dir_rows(out_dir: Path) -> pa.Table:
    from qtts.core.jobs.output.results import present_records

    done = present_records(out_dir, RECORD_COLUMNS)
    done = done.take(pc.sort_indices(done["row"]))
    return pa.table(
        {
            "id": done["id"],
            "file_name": done["file"],
            "text": done["text"],
            "language": done["language"].cast(pa.string()),
            "duration_s": done["duration_s"],
            "stamp": record_stamps(done["t"]),
            "voice": _voices(
                [
                    ("speaker", done["speaker"]),
                    ("instruct", done["instruct"]),
                    ("ref", done["ref_digest"]),
                ]
            ),
            "ref_audio": done["ref_audio"].cast(pa.string()),
        }
    )


def _voices(parts: list[tuple[str, pa.Array]]) -> pa.Array:
    """One string per row naming its voice from the parts it has ("speaker=ryan"), null when it
    has none of them."""
    named = [
        pc.binary_join_element_wise(pa.scalar(f"{name}="), values.cast(pa.string()), "")
        for name, values in parts
    ]
    joined = pc.binary_join_element_wise(*(pc.fill_null(v, "") for v in named), "\x1f")
    present = pc.is_valid(named[0])
    for v in named[1:]:
        present = pc.or_(present, pc.is_valid(v))
    return pc.if_else(present, joined, pa.scalar(None, pa.string()))


def _folder_rows(root: Path) -> pa.Table:
    import pyarrow.json as pj

    path = root / METADATA_NAME
    try:
        table = pj.read_json(path)
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"cannot read {path}: {one_line(exc)}") from None
    missing = [c for c in ("file_name", "text") if c not in table.column_names]
    if missing:
        raise UsageError(
            f"{path} has no {' or '.join(missing)}: each line needs file_name and text"
        )
    table = table.filter(pc.is_valid(table["file_name"]))
    names = table["file_name"].cast(pa.string()).combine_chunks()
    if pc.count_distinct(names).as_py() < len(names):
        raise UsageError(f"{path} names the same file_name twice")

    def optional(name: str) -> pa.Array:
        if name not in table.column_names:
            return pa.nulls(table.num_rows, pa.string())
        return table[name].cast(pa.string()).combine_chunks()

    refs = optional("ref_audio").to_pylist()
    refs = [None if r is None else str(root / r) for r in refs]  # an absolute one stays as is
    return pa.table(
        {
            "file_name": names,
            "text": table["text"].cast(pa.large_string()),
            "language": optional("language"),
            "duration_s": pa.nulls(len(names), pa.float64()),
            "stamp": _file_stamps(root, names),
            "voice": _voices([("speaker", optional("speaker"))]),
            "ref_audio": pa.array(refs, pa.string()),
        }
    )


def _file_stamps(root: Path, names: pa.Array) -> pa.Array:
    """size:mtime_ns of each file, null when it cannot be stat'ed (it then fails alone)."""
    stamps = []
    for name in names.to_pylist():
        try:
            st = os.stat(root / name)
            stamps.append(f"{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            stamps.append(None)
    return pa.array(stamps, pa.string())
