"""A two-part archive format for the seam's tests (no such format ships): `meta.{shard}.jsonl`
(a JSON line per sample) beside `audio.{shard}.tar` (the key part). It proves the seam handles
a shard of several files without knowing any format: sealing names the key last, a kill
between renames leaves a part that retraction removes, repacks name every part.
conftest.py's `pair` fixture adds it to the registry for one test."""

from __future__ import annotations

import json
from pathlib import Path

from qtts.core.jobs.output.stores import registry, tar_members
from qtts.core.jobs.output.stores.archive import ArchiveFormat, ArchiveShard, Part

META = Part("meta.", ".jsonl")
AUDIO = Part("audio.", ".tar")


def _id(name: str) -> str:
    return name.rsplit(".", 1)[0]


class PairWriter:
    def __init__(self, open_part, sample_rate):
        self._meta = open_part(META)
        self._tar = tar_members.open_writer(open_part(AUDIO))

    def add(self, row_id, audio, audio_format, codes, record):
        self._meta.write(json.dumps({"id": row_id, "duration": record["duration_s"]}).encode())
        self._meta.write(b"\n")
        tar_members.add(self._tar, f"{row_id}.{audio_format}", audio)
        if codes is not None:
            tar_members.add(self._tar, f"{row_id}.npy", codes)

    def close(self):
        self._tar.close()


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def keys_in(part: Part, path: Path) -> list[str]:
    if part == META:
        return [m["id"] for m in _lines(path)]
    return tar_members.keys(path, _id)


def copy_without(part: Part, path: Path, file, drop) -> int:
    if part == AUDIO:
        return tar_members.copy_without(path, file, drop, _id)
    kept = [m for m in _lines(path) if m["id"] not in drop]
    file.write("".join(json.dumps(m) + "\n" for m in kept).encode())
    return len(kept)


def samples(shard: ArchiveShard, wanted):
    for row_id, members in tar_members.samples(shard.key_path, _id, wanted):
        audio = next(d for n, d in members.items() if not n.endswith(".npy"))
        yield row_id, audio, next((d for n, d in members.items() if n.endswith(".npy")), None)


PAIR = ArchiveFormat(
    name="pair",
    help="a test format",
    parts=(META, AUDIO),
    member=lambda row_id, audio_format: f"{row_id}.{audio_format}",
    writer=PairWriter,
    keys_in=keys_in,
    copy_without=copy_without,
    samples=samples,
    durations=lambda shard: {m["id"]: m["duration"] for m in _lines(shard.path(META))},
    open_members=lambda path, kept: tar_members.TarMembers(path),
)


def register(monkeypatch) -> ArchiveFormat:
    """PAIR in the registry until the test ends (conftest.py's `pair` fixture)."""
    discover = registry.discover
    monkeypatch.setattr(registry, "discover", lambda name: {**discover(name), "pair": PAIR})
    registry.formats.cache_clear()
    return PAIR
