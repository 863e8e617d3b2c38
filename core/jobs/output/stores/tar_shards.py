"""WebDataset shards: plain tar files whose members are `{key}.wav|flac`, `{key}.json` and, with
--save-codes, `{key}.codes.npy`, all of one sample together.

WebDataset takes a member's key as its name up to the first dot, so an id with a dot in it
(`book1.ch2`) would come back as key `book1` with extension `ch2.wav`. The key is therefore the
id with `%` written `%25` and `.` written `%2E` (percent-encoding of those two characters only):
reversible (id_of_key), and the same as the id for every id without either. The `.json` member
holds the true id. Knows tar members; no records beyond their fields, no rows.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Collection, Iterable, Iterator
from typing import BinaryIO

from qtts.core.jobs.output.stores.sample_fields import sample_meta
from qtts.core.jobs.output.writer import AUDIO_FORMATS

SUFFIX = ".tar"
_ESCAPED = re.compile("%(25|2E)")
_MTIME = 0  # members carry no wall clock: the same rows make the same bytes


def key_of_id(row_id: str) -> str:
    return row_id.replace("%", "%25").replace(".", "%2E")


def id_of_key(key: str) -> str:
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else ".", key)


def audio_member(row_id: str, audio_format: str) -> str:
    return f"{key_of_id(row_id)}.{audio_format}"


class TarShardWriter:
    """Appends samples to an open tar file (the shard's temp file)."""

    def __init__(self, file: BinaryIO) -> None:
        self._tar = tarfile.open(fileobj=file, mode="w", format=tarfile.PAX_FORMAT)

    def add(self, row_id: str, audio: bytes, audio_format: str, codes: bytes | None, record: dict):
        key = key_of_id(row_id)
        meta = json.dumps(sample_meta(record), ensure_ascii=False).encode()
        members = [(f"{key}.{audio_format}", audio), (f"{key}.json", meta)]
        if codes is not None:
            members.append((f"{key}.codes.npy", codes))
        for name, data in members:
            _add(self._tar, name, data)

    def close(self) -> None:
        self._tar.close()  # the end-of-archive blocks; the caller flushes and fsyncs the file


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), _MTIME, 0o644
    tar.addfile(info, io.BytesIO(data))


def keys_in(path) -> list[str]:
    """The ids of a shard's samples, in order."""
    with tarfile.open(path, mode="r") as tar:
        seen: dict[str, None] = {}
        for info in tar:
            seen.setdefault(id_of_key(info.name.split(".", 1)[0]), None)
    return list(seen)


def samples(path, wanted: Collection[str]) -> Iterator[tuple[str, bytes, bytes | None]]:
    """(id, audio bytes, codes bytes or None) of the shard's samples whose ids are in `wanted`,
    in shard order; a sample's members sit together, so one sample is held at a time."""
    current, audio, codes = None, None, None
    with tarfile.open(path, mode="r") as tar:
        for info in tar:
            key, _, ext = info.name.partition(".")
            row_id = id_of_key(key)
            if row_id != current:
                if audio is not None:
                    yield current, audio, codes
                current, audio, codes = row_id, None, None
            if row_id not in wanted:
                continue
            if ext in AUDIO_FORMATS:
                audio = tar.extractfile(info).read()
            elif ext == "codes.npy":
                codes = tar.extractfile(info).read()
        if audio is not None:
            yield current, audio, codes


def durations_in(path) -> dict[str, float]:
    """{id: seconds} of a shard's samples, from their .json members."""
    out = {}
    with tarfile.open(path, mode="r") as tar:
        for info in tar:
            if info.name.endswith(".json"):
                meta = json.loads(tar.extractfile(info).read())
                out[meta["id"]] = float(meta["duration_s"] or 0.0)
    return out


def copy_without(path, file: BinaryIO, drop: Iterable[str]) -> int:
    """The shard's members into `file`, less the samples of the ids in `drop`; the samples kept."""
    drop = set(drop)
    kept: set[str] = set()
    with (
        tarfile.open(path, mode="r") as src,
        tarfile.open(fileobj=file, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for info in src:
            row_id = id_of_key(info.name.split(".", 1)[0])
            if row_id in drop:
                continue
            kept.add(row_id)
            dst.addfile(info, src.extractfile(info))
    return len(kept)
