"""Reading finished rows back from where they are, for a repack: a plain file by its name (its
codes from `{id}.codes.npy`), an archive shard's samples through its format's reader (the
registry's, by shard_files.shard_at), one container at a time, in its own order, one sample in
memory at a time.
And a row's audio in another encoding when the run's format differs: the 16-bit PCM decoded and
encoded again, losslessly (the samples are the ones synthesized; nothing is resampled); in the
same format, copied once its header reads as audio.
Knows locations, formats and encodings; no records beyond ids.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

from qtts.core.jobs.output.stores.files import codes_name
from qtts.core.jobs.output.stores.locations import ARCHIVE_DIR
from qtts.core.jobs.output.stores.shard_files import shard_at

MAGIC = {b"RIFF": "wav", b"fLaC": "flac"}


def is_shard(container: str) -> bool:
    """Whether a location's container is an archive shard (its key part) or a plain file."""
    return container.startswith(f"{ARCHIVE_DIR}/")


def read_container(
    out_dir: Path, container: str, ids: list[str], *, with_codes: bool
) -> Iterator[tuple[str, bytes, bytes | None]]:
    """(id, audio bytes, codes bytes or None) of the rows `ids` held by `container` (relative to
    the out dir): a shard's in shard order; a row it does not hold is not yielded."""
    shard = shard_at(out_dir, container)
    if shard is None:  # a plain file holds one row
        row_id = ids[0]
        codes = (out_dir / codes_name(row_id)).read_bytes() if with_codes else None
        yield row_id, (out_dir / container).read_bytes(), codes
        return
    for row_id, audio, codes in shard.fmt.samples(shard, set(ids)):
        yield row_id, audio, codes if with_codes else None


def audio_format_of(data: bytes) -> str | None:
    return MAGIC.get(bytes(data[:4]))


def in_format(data: bytes, audio_format: str) -> bytes:
    """The audio encoded as `audio_format` (wav | flac), 16-bit PCM as written. In the same
    format its bytes are copied once their header reads as audio (soundfile: a RuntimeError
    where it does not); a body cut short or damaged past the header is copied as it is."""
    import soundfile as sf

    if audio_format_of(data) == audio_format:
        sf.info(io.BytesIO(data))
        return data
    pcm, rate = sf.read(io.BytesIO(data), dtype="int16")
    out = io.BytesIO()
    sf.write(out, pcm, rate, subtype="PCM_16", format=audio_format.upper())
    return out.getvalue()
