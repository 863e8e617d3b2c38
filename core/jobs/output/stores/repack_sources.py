"""Reading finished rows back from where they are, for a repack: a plain file by its name (its
codes from `{id}.codes.npy`), an archive shard's samples through its format's reader (the
registry's, by shard_files.shard_at), one container at a time, in its own order, one sample in
memory at a time.
Each row's audio is checked before it is packed (`check_whole`): the size and sample count its
record gives, read from the header alone, so a file cut short or damaged is never copied into
the new layout as if it were whole. Then, when the run's format differs, its 16-bit PCM is
decoded and encoded again, losslessly (the samples are the ones synthesized; nothing is
resampled); in the same format its bytes are copied.
Knows locations, formats and encodings; no records beyond ids and the numbers checked.
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


def check_whole(data: bytes, *, nbytes: int | None, samples: int | None) -> None:
    """Raise ValueError (soundfile: RuntimeError) where the audio is not what its record says:
    another size (a body cut short, in any format: a FLAC's header still gives every sample)
    or another sample count from its header (a WAV's shrinks to the data there). Nothing is
    decoded; a record without the number (None) is not checked by it."""
    import soundfile as sf

    if nbytes is not None and len(data) != nbytes:
        raise ValueError(f"{len(data):,} bytes where {nbytes:,} were written")
    frames = sf.info(io.BytesIO(data)).frames
    if samples is not None and frames != samples:
        raise ValueError(f"{frames:,} samples where {samples:,} were written")


def in_format(data: bytes, audio_format: str) -> bytes:
    """The audio (check_whole first) encoded as `audio_format` (wav | flac), 16-bit PCM as
    written; in the same format, its bytes as they are."""
    import soundfile as sf

    if audio_format_of(data) == audio_format:
        return data
    pcm, rate = sf.read(io.BytesIO(data), dtype="int16")
    out = io.BytesIO()
    sf.write(out, pcm, rate, subtype="PCM_16", format=audio_format.upper())
    return out.getvalue()
