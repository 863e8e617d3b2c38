"""Rows that clone a voice file (the `voice` column, or `--voice`): each distinct file resolved,
its header checked against the model, and digested once. Its record's ref_digest is the file's,
its ref_text the voice's transcript; a row giving a voice and its own ref_audio or ref_text fails.
Knows voice file headers and the TextModel; no tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.state.ref_digests import RefDigests
from qtts.core.model.voice_file import VoiceFileError, VoiceHeader, read_header, refusal

WITH_REF_AUDIO = "voice and ref_audio both given: a row clones one of them"
WITH_REF_TEXT = "ref_text given with a voice: the voice file holds its own transcript"


def check_voice_flag(path: str, model: TextModel) -> None:
    """--voice as given: a voice file this model can use, else a UsageError (exit 2)."""
    try:
        head = read_header(path)
    except VoiceFileError as e:
        raise UsageError(f"--voice: {e}") from None
    problem = refusal(head, model.voice_identity, model.name)
    if problem:
        raise UsageError(f"--voice: {problem}")


def resolve_voices(
    rows: pa.Table, model: TextModel, ref_dir: Path | None, refs: RefDigests, x_vector_only: bool
) -> dict[str, pa.Array]:
    """Per row: the voice's resolved path, digest, transcript and why the row fails (or null)."""
    codes, values = distinct_codes(rows["voice"])
    found = [_resolve(v, model, ref_dir, refs) for v in values]
    take = pa.array(codes)
    path, digest, error = (
        pa.array([f[i] for f in found], pa.string()).take(take) for i in (0, 1, 3)
    )
    text = pa.array([None if x_vector_only else f[2] for f in found], pa.string()).take(take)
    named = pc.is_valid(rows["voice"])
    both = pc.and_(named, pc.is_valid(rows["ref_audio"]))
    with_text = pc.and_(named, pc.is_valid(rows["ref_text"]))
    none = pa.scalar(None, pa.string())
    error = pc.coalesce(
        pc.if_else(both, WITH_REF_AUDIO, none), pc.if_else(with_text, WITH_REF_TEXT, none), error
    )
    return {"path": path, "digest": digest, "text": text, "error": error}


def distinct_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list]:
    """(index of each value in its distinct values, the distinct values); null is a value."""
    enc = pc.dictionary_encode(column.combine_chunks(), null_encoding="encode")
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()


def under(value: str, ref_dir: Path | None) -> Path:
    """A row's reference or voice path: a relative one is under `ref_dir` (the manifest's)."""
    path = Path(value).expanduser()
    return ref_dir / path if not path.is_absolute() and ref_dir is not None else path


def _resolve(value: str | None, model: TextModel, ref_dir: Path | None, refs: RefDigests):
    """(path, digest, transcript, error) of one distinct voice value."""
    if value is None:
        return None, None, None, None
    path = under(value, ref_dir)
    try:
        head: VoiceHeader = read_header(path)
    except VoiceFileError as e:
        return None, None, None, str(e)
    problem = refusal(head, model.voice_identity, model.name)
    if problem:
        return None, None, None, problem
    resolved = str(path.resolve())
    try:
        return resolved, refs.digest(resolved), head.transcript, None
    except OSError as e:
        return None, None, None, f"voice unreadable: {path}: {e.strerror or e}"
