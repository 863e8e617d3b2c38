"""--output shar: lhotse's Shar format (`lhotse.CutSet.from_shar`; NeMo reads it through lhotse). A
shard is `cuts.{shard}.jsonl.gz` (a MonoCut per row, the other sample fields in `custom`),
`codes.{shard}.tar` (the codes, or lhotse's empty placeholder pair) and `recording.{shard}.tar`
(the audio and its Recording: the key part). Written here, not by lhotse's writers, which name and
open their files themselves (and need torch): a shard is written under temp names and named once
its rows are journalled. The JSON is lhotse's own `to_dict` form.
Standard library only at import. Knows lhotse's manifests; no rows beyond their fields.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import BinaryIO

from qtts.core.jobs.output.stores import tar_members
from qtts.core.jobs.output.stores.archive import ArchiveFormat, ArchiveShard, Part

CUTS = Part("cuts.", ".jsonl.gz")
CODES = Part("codes.", ".tar")
RECORDING = Part("recording.", ".tar")  # the key part: locations name it, it is named last
IN_CUT = ("id", "text", "speaker", "language", "duration_s", "sample_rate")  # not in `custom`
GZIP_LEVEL = 6


def audio_member(row_id: str, audio_format: str) -> str:
    return f"{row_id}.{audio_format}"


def _id_of_member(name: str) -> str:
    return name.rsplit(".", 1)[0]


def _line(obj: dict) -> bytes:
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode()


def _gzip(file: BinaryIO) -> gzip.GzipFile:
    """No name, no time in the header: the same rows make the same bytes."""
    return gzip.GzipFile(filename="", mode="wb", fileobj=file, mtime=0, compresslevel=GZIP_LEVEL)


def manifests(row_id: str, audio: bytes, codes: bytes | None, record: dict):
    """(cut, recording, codes array or None): the row's lhotse manifests as `to_dict` writes
    them, their data left to the tars (a Shar placeholder)."""
    import numpy as np

    from qtts.core.jobs.output.recorder import sample_meta

    rate = int(record["sample_rate"])
    samples = record.get("num_samples") or _num_samples(audio)
    duration = samples / rate
    recording = {"id": row_id, "sources": [{"type": "shar", "channels": [0], "source": ""}],
                 "sampling_rate": rate, "num_samples": int(samples), "duration": duration,
                 "channel_ids": [0]}  # fmt: skip
    supervision = {"id": row_id, "recording_id": row_id, "start": 0, "duration": duration,
                   "channel": 0, "text": record.get("text")}  # fmt: skip
    for name in ("language", "speaker"):
        if record.get(name) is not None:
            supervision[name] = record[name]
    custom = {k: v for k, v in sample_meta(record).items() if k not in IN_CUT}
    array = None
    if codes is not None:
        array = {"storage_type": "shar", "storage_path": "", "storage_key": "",
                 "shape": list(np.load(io.BytesIO(codes)).shape)}  # fmt: skip
        custom["codes"] = array
    cut = {"id": row_id, "start": 0, "duration": duration, "channel": 0,
           "supervisions": [supervision], "recording": recording, "custom": custom,
           "type": "MonoCut"}  # fmt: skip
    return cut, recording, array


def _num_samples(audio: bytes) -> int:
    import soundfile as sf

    return sf.info(io.BytesIO(audio)).frames


class SharShardWriter:
    """Appends rows to a shard's three open part files (their temp files)."""

    def __init__(self, open_part: Callable[[Part], BinaryIO], sample_rate: int) -> None:
        self._cuts = _gzip(open_part(CUTS))
        self._codes = tar_members.open_writer(open_part(CODES))
        self._recording = tar_members.open_writer(open_part(RECORDING))

    def add(self, row_id: str, audio: bytes, audio_format: str, codes: bytes | None, record: dict):
        cut, recording, array = manifests(row_id, audio, codes, record)
        tar_members.add(self._recording, audio_member(row_id, audio_format), audio)
        tar_members.add(self._recording, f"{row_id}.json", _line(recording))
        if array is None:  # lhotse's placeholder: this cut has no codes
            tar_members.add(self._codes, f"{row_id}.nodata", b"")
            tar_members.add(self._codes, f"{row_id}.nometa", b"")
        else:
            tar_members.add(self._codes, f"{row_id}.npy", codes)
            tar_members.add(self._codes, f"{row_id}.json", _line(array))
        self._cuts.write(_line(cut))

    def close(self) -> None:
        for part in (self._cuts, self._codes, self._recording):
            part.close()  # the gzip trailer, the tars' end blocks; the files stay open


def _cut_lines(path: Path) -> Iterator[tuple[str, bytes]]:
    with gzip.open(path, "rb") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)["id"], line


def keys_in(part: Part, path: Path) -> list[str]:
    if part == CUTS:
        return [row_id for row_id, _ in _cut_lines(path)]
    return tar_members.keys(path, _id_of_member)


def copy_without(part: Part, path: Path, file: BinaryIO, drop: set[str]) -> int:
    if part != CUTS:
        return tar_members.copy_without(path, file, drop, _id_of_member)
    kept = 0
    with _gzip(file) as out:
        for row_id, line in _cut_lines(path):
            if row_id not in drop:
                out.write(line)
                kept += 1
    return kept


def samples(
    shard: ArchiveShard, wanted: Collection[str]
) -> Iterator[tuple[str, bytes, bytes | None]]:
    """(id, audio, codes or None) of the rows in `wanted`, in shard order: the recording and
    codes tars read side by side (they hold the same rows in the same order)."""
    codes = _codes(shard.path(CODES), wanted)
    ahead = next(codes, None)
    for row_id, members in tar_members.samples(shard.key_path, _id_of_member, wanted):
        audio = next((d for n, d in members.items() if not n.endswith(".json")), None)
        while ahead is not None and ahead[0] != row_id:
            ahead = next(codes, None)
        kept = ahead[1] if ahead is not None else None
        if audio is not None:
            yield row_id, audio, kept


def _codes(path: Path, wanted: Collection[str]) -> Iterator[tuple[str, bytes | None]]:
    if not path.exists():
        return
    for row_id, members in tar_members.samples(path, _id_of_member, wanted):
        yield row_id, next((d for n, d in members.items() if n.endswith(".npy")), None)


def durations(shard: ArchiveShard) -> dict[str, float]:
    lines = _cut_lines(shard.path(CUTS))
    return {row_id: float(json.loads(line)["duration"]) for row_id, line in lines}


FORMAT = ArchiveFormat(
    name="shar",
    help=(
        "lhotse Shar shards in OUT/data/ (cuts.*.jsonl.gz, recording.*.tar, codes.*.tar), as "
        "lhotse and NeMo read them"
    ),
    parts=(CUTS, CODES, RECORDING),
    member=audio_member,
    writer=SharShardWriter,
    keys_in=keys_in,
    copy_without=copy_without,
    samples=samples,
    durations=durations,
    open_members=lambda path, kept: tar_members.TarMembers(path),
    read_errors=lambda: (tarfile.TarError, EOFError, ValueError),
    # no Hub loader reads a Shar folder (hub=None); lhotse (and NeMo through it) does
    # (its fields named, not in_dir=: lhotse would take a running job's temp file for a field)
    reads_back=(
        "import glob",
        "from lhotse import CutSet",
        "",
        "cuts = CutSet.from_shar(fields={",
        '    "cuts": sorted(glob.glob({data} + "/cuts.*.jsonl.gz")),',
        '    "recording": sorted(glob.glob({data} + "/recording.*.tar")),',
        "})",
    ),
)
