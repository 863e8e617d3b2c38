"""--output webdataset: tar shards `{shard}.tar` of `{key}.wav|flac`, `{key}.json` and, with
--save-codes, `{key}.codes.npy`: the key is the id with `%` and `.` percent-encoded (WebDataset cuts
a name at its first dot), the `.json` holds the true id. Knows tar members; no rows.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import BinaryIO

from qtts.core.jobs.output.stores import tar_members
from qtts.core.jobs.output.stores.archive import ArchiveFormat, ArchiveShard, HubLoad, Part

SHARD = Part("", ".tar")
AUDIO_EXTENSIONS = ("wav", "flac")
_ESCAPED = re.compile("%(25|2E)")


def key_of_id(row_id: str) -> str:
    return row_id.replace("%", "%25").replace(".", "%2E")


def id_of_key(key: str) -> str:
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else ".", key)


def _id_of_member(name: str) -> str:
    return id_of_key(name.split(".", 1)[0])


def audio_member(row_id: str, audio_format: str) -> str:
    return f"{key_of_id(row_id)}.{audio_format}"


class TarShardWriter:
    """Appends samples to an open tar file (the shard's temp file)."""

    def __init__(self, file: BinaryIO) -> None:
        self._tar = tar_members.open_writer(file)

    def add(self, row_id: str, audio: bytes, audio_format: str, codes: bytes | None, record: dict):
        from qtts.core.jobs.output.recorder import sample_meta

        key = key_of_id(row_id)
        meta = json.dumps(sample_meta(record), ensure_ascii=False).encode()
        members = [(f"{key}.{audio_format}", audio), (f"{key}.json", meta)]
        if codes is not None:
            members.append((f"{key}.codes.npy", codes))
        for name, data in members:
            tar_members.add(self._tar, name, data)

    def close(self) -> None:
        self._tar.close()  # the end-of-archive blocks; the caller flushes and fsyncs the file


def keys_in(part: Part, path: Path) -> list[str]:
    """The ids of a shard's samples, in order."""
    return tar_members.keys(path, _id_of_member)


def copy_without(part: Part, path: Path, file: BinaryIO, drop: set[str]) -> int:
    """The shard's members into `file`, less the samples of the ids in `drop`; samples kept."""
    return tar_members.copy_without(path, file, drop, _id_of_member)


def samples(
    shard: ArchiveShard, wanted: Collection[str]
) -> Iterator[tuple[str, bytes, bytes | None]]:
    """(id, audio bytes, codes bytes or None) of the shard's samples whose ids are in `wanted`,
    in shard order; a sample's members sit together, so one sample is held at a time."""
    for row_id, members in tar_members.samples(shard.key_path, _id_of_member, wanted):
        by_ext = {name.partition(".")[2]: data for name, data in members.items()}
        audio = next((by_ext[e] for e in AUDIO_EXTENSIONS if e in by_ext), None)
        if audio is not None:
            yield row_id, audio, by_ext.get("codes.npy")


def durations(shard: ArchiveShard) -> dict[str, float]:
    """{id: seconds} of a shard's samples, from their .json members."""
    out = {}
    with tarfile.open(shard.key_path, mode="r") as tar:
        for info in tar:
            if info.name.endswith(".json"):
                meta = json.loads(tar.extractfile(info).read())
                out[meta["id"]] = float(meta["duration_s"] or 0.0)
    return out


FORMAT = ArchiveFormat(
    name="webdataset",
    help="tar shards in OUT/data/ ({id}.wav, {id}.json)",
    parts=(SHARD,),
    member=audio_member,
    writer=lambda open_part, sample_rate: TarShardWriter(open_part(SHARD)),
    keys_in=keys_in,
    copy_without=copy_without,
    samples=samples,
    durations=durations,
    open_members=lambda path, kept: tar_members.TarMembers(path),
    read_errors=lambda: (tarfile.TarError,),
    hub=HubLoad("data/*.tar"),  # the webdataset builder types each member by its extension
    reads_back=(
        "import glob, webdataset as wds",
        'samples = wds.WebDataset(sorted(glob.glob({data} + "/*.tar")))',
    ),
)
