"""Reading finished rows back from where they are, for a repack: a plain file by its name (its
codes from `{id}.codes.npy`), an archive shard's samples through its format's reader
(shard_formats), one container at a time, in its own order, one sample in memory at a time.
And a row's audio in another encoding when the run's format differs: the 16-bit PCM decoded and
encoded again, losslessly (the samples are the ones synthesized; nothing is resampled).
Knows locations, formats and encodings; no records beyond ids.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

from qtts.core.jobs.output.stores.files import codes_name
from qtts.core.jobs.output.stores.locations import ARCHIVE_DIR
from qtts.core.jobs.output.stores.shard_formats import format_of

MAGIC = {b"RIFF": "wav", b"fLaC": "flac"}


def is_shard(container: str) -> bool:
    return container.startswith(f"{ARCHIVE_DIR}/") and format_of(container) is not None


def read_container(
    out_dir: Path, container: str, ids: list[str], *, with_codes: bool
) -> Iterator[tuple[str, bytes, bytes | None]]:
    """(id, audio bytes, codes bytes or None) of the rows `ids` held by `container` (relative to
    the out dir): a shard's in shard order; a row it does not hold is not yielded."""
    path = out_dir / container
    if not is_shard(container):  # a plain file holds one row
        row_id = ids[0]
        codes = (out_dir / codes_name(row_id)).read_bytes() if with_codes else None
        yield row_id, path.read_bytes(), codes
        return
    for row_id, audio, codes in format_of(container).samples(path, set(ids)):
        yield row_id, audio, codes if with_codes else None


def audio_format_of(data: bytes) -> str | None:
    return MAGIC.get(bytes(data[:4]))


def in_format(data: bytes, audio_format: str) -> bytes:
    """The audio encoded as `audio_format` (wav | flac), 16-bit PCM as written."""
    if audio_format_of(data) == audio_format:
        return data
    import soundfile as sf

    pcm, rate = sf.read(io.BytesIO(data), dtype="int16")
    out = io.BytesIO()
    sf.write(out, pcm, rate, subtype="PCM_16", format=audio_format.upper())
    return out.getvalue()
