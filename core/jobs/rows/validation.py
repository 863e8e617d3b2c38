"""Row validation over whole columns, before any weights load: every row gets its resolved fields
or the reason it fails (unsafe id, empty text, a voice the model refuses, bad seed, no reference
audio for a Base model, an unusable voice file). Work is per distinct value: the model's voice
check runs once per (speaker, language, instruct) and each clip or voice file is read once. Also
the id seed (docs/job-state.md, "The default seed is pinned") and a big job's spilled texts.
Knows the TextModel interface; no tensors; writes nothing but the spilled texts' nameless file."""

from __future__ import annotations

import functools
import hashlib
import math
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.contract.spec import RowDefaults
from qtts.core.jobs.rows.ids import id_errors, patched
from qtts.core.jobs.rows.manifest import BLANK
from qtts.core.jobs.rows.voices import distinct_codes, resolve_voices, under
from qtts.core.jobs.state.records import text_digests
from qtts.core.jobs.state.ref_digests import RefDigests

MAX_SEED = 2**63 - 1
BASE_NEEDS_REF = "missing ref_audio: Base models clone a voice from reference audio"
REF_IGNORED = "ref_audio ignored: only Base models clone a voice from reference audio"


@dataclass
class Prepared:
    rows: pa.Table  # records.ROW_FIELDS columns as resolved, plus "error" (null: valid so far)
    warnings: Counter[str] = field(default_factory=Counter)  # message -> rows it applies to

    def valid(self) -> pa.Table:
        if self.rows["error"].null_count == self.rows.num_rows:
            return self.rows  # every row valid: no copy of a million rows
        return self.rows.filter(pc.is_null(self.rows["error"]))

    def rejected(self) -> pa.Table:
        return self.rows.filter(pc.is_valid(self.rows["error"]))


def prepare_rows(
    rows: pa.Table,
    model: TextModel,
    defaults: RowDefaults,
    *,
    ref_dir: Path | None,
    refs: RefDigests,
    x_vector_only: bool = False,
) -> Prepared:
    """Resolve and check every row (ref_dir: where relative ref_audio and voice paths point)."""
    warnings: Counter[str] = Counter()
    text = rows["text"]
    none = pa.scalar(None, pa.string())
    blank = pc.if_else(pc.match_substring_regex(text, BLANK), "empty text", none)
    text_error = pc.if_else(pc.is_null(text), "text is null", blank)
    voice = _voices(rows, model, defaults)
    seed, seed_error = _seeds(rows["seed"], defaults.seed, rows["id"])
    base = model.config.tts_model_type == "base"
    ref = _references(rows, ref_dir, refs) if base else None
    clone = None  # rows naming a voice file: none (most jobs), so no column is made for them
    if rows["voice"].null_count < rows.num_rows:
        clone = resolve_voices(rows, model, ref_dir, refs, x_vector_only)
        ref = _with_voices(rows, ref, clone) if base else ref
    # A row's first error, in this order: its id, text, voice, seed, then its clone reference
    errors = [id_errors(rows["id"]), text_error, voice["error"], seed_error]
    errors += [ref["error"]] if base else []
    errors += [clone["error"]] if clone and not base else []
    error = pc.coalesce(*errors)
    ok = pc.is_null(error)
    for item in pc.value_counts(pc.filter(voice["warning"], ok).drop_null()).to_pylist():
        warnings[item["values"]] += item["counts"]
    if not base:
        ignored = pc.sum(pc.and_(ok, pc.is_valid(rows["ref_audio"]))).as_py() or 0
        if ignored:
            warnings[REF_IGNORED] += ignored
    nothing = pa.nulls(rows.num_rows, pa.string())
    out = pa.table(
        {
            "id": rows["id"],
            "row": rows["row"],
            "text": text,
            "text_digest": text_digests(text),
            "speaker": voice["speaker"],
            "language": voice["language"],
            "instruct": voice["instruct"],
            "seed": seed,
            "ref_digest": ref["digest"] if base else nothing,
            "ref_text": ref["text"] if base else nothing,
            "ref_audio": ref["path"] if base else nothing,
            "voice": clone["path"] if base and clone else nothing,
            "error": error,
        }
    )
    return Prepared(out, warnings)


def _with_voices(rows: pa.Table, ref: dict, clone: dict) -> dict[str, pa.Array]:
    """A Base row's reference: its voice file where it names one (no ref_audio then)."""
    named = pc.is_valid(rows["voice"])
    out = {k: pc.if_else(named, clone[k], ref[k]) for k in ("digest", "error", "text")}
    out["path"] = pc.if_else(named, pa.scalar(None, pa.string()), ref["path"])
    return out


def _distinct_rows(codes: tuple[np.ndarray, ...], dims: tuple[int, ...]) -> tuple[list, np.ndarray]:
    """The distinct tuples of codes, in order, and each row's index among them. Where every tuple
    fits one int64, one key per row: a 1-D unique is ten times faster than np.unique's rows."""
    if math.prod(dims) < 2**63:
        keys, inverse = np.unique(np.ravel_multi_index(codes, dims), return_inverse=True)
        return np.stack(np.unravel_index(keys, dims), axis=1).tolist(), inverse
    combos, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
    return combos.tolist(), inverse.reshape(-1)


def _voices(rows: pa.Table, model: TextModel, d: RowDefaults) -> dict[str, pa.Array]:
    """model.normalize_row once per distinct (speaker, language, instruct)."""
    columns = [
        pc.fill_null(rows["speaker"], d.speaker) if d.speaker else rows["speaker"],
        pc.fill_null(rows["language"], d.language),
        pc.fill_null(rows["instruct"], d.instruct) if d.instruct else rows["instruct"],
    ]
    codes, values = zip(*(distinct_codes(c) for c in columns), strict=True)
    combos, inverse = _distinct_rows(codes, tuple(len(v) for v in values))
    results = []
    for sp, lang, ins in combos:
        try:
            results.append(
                (*model.normalize_row(values[0][sp], values[1][lang], values[2][ins]), None)
            )
        except ValueError as e:
            results.append((None, None, None, None, str(e)))
    names = ("speaker", "language", "instruct", "warning", "error")
    index = pa.array(inverse.reshape(-1).astype(np.int32))
    # Few distinct voices for many rows: dictionary columns (an index per row, not a string).
    return {
        n: pa.DictionaryArray.from_arrays(index, pa.array([r[i] for r in results], pa.string()))
        if n in ("speaker", "language")
        else pa.array([r[i] for r in results], pa.string()).take(index)
        for i, n in enumerate(names)
    }


def _seeds(
    column: pa.ChunkedArray, default: int | None, ids: pa.ChunkedArray
) -> tuple[pa.Array, pa.Array]:
    """(seed, reason) per row: null and NaN take the default (None: id_seeds); integers in range."""
    column = column.combine_chunks()
    n = len(column)
    if pa.types.is_null(column.type):
        return _defaults(default, ids, pa.array(np.ones(n, dtype=bool))), pa.nulls(n, pa.string())
    if pa.types.is_floating(column.type):
        column = pc.if_else(pc.is_nan(column), None, column)
        bad = pc.or_(
            pc.not_equal(pc.floor(column), column),
            pc.or_(pc.less(column, 0), pc.greater_equal(column, 2.0**63)),
        )
    else:
        bad = pc.or_(pc.less(column, 0), pc.greater(column, MAX_SEED))
    bad = pc.fill_null(bad, False)
    bad_at = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
    errors = patched(
        pa.nulls(n, pa.string()), bad_at, [_seed_error(v) for v in column.take(bad_at).to_pylist()]
    )
    good = pc.cast(pc.if_else(bad, None, column), pa.int64(), safe=False)
    if good.null_count:
        good = pc.coalesce(good, _defaults(default, ids, pc.is_null(good)))
    return good, errors


def _defaults(default: int | None, ids: pa.ChunkedArray, where: pa.Array) -> pa.Array:
    """The default seed of each row (0 where `where` is false: a value to coalesce over)."""
    if default is not None:
        return pa.array(np.full(len(where), default, dtype=np.int64))
    where = where.to_numpy(zero_copy_only=False)
    seeds = np.zeros(len(where), dtype=np.int64)
    at = np.flatnonzero(where)
    if len(at) == len(where):
        return id_seeds(ids)
    seeds[at] = id_seeds(ids.take(pa.array(at))).to_numpy()
    return pa.array(seeds)


def _seed_error(value: int | float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"seed must be an integer, got {value}"
    # A float past 2**53 is not the integer that was typed: say it as the float it was read as
    got = int(value) if isinstance(value, int) or abs(value) < 2.0**53 else f"{value:g}"
    return f"seed must be in [0, 2**63 - 1], got {got}"


def _references(rows: pa.Table, ref_dir: Path | None, refs: RefDigests) -> dict[str, pa.Array]:
    """Base models: each distinct ref_audio resolved, checked to exist and digested once."""
    codes, values = distinct_codes(rows["ref_audio"])
    resolved = [_resolve_ref(v, ref_dir, refs) for v in values]  # (path, digest, error)
    take = pa.array(codes)
    path, digest, error = (
        pa.array([r[i] for r in resolved], pa.string()).take(take) for i in range(3)
    )
    text = pc.if_else(pc.is_valid(path), rows["ref_text"], pa.scalar(None, pa.string()))
    return {"path": path, "digest": digest, "error": error, "text": text}


def _resolve_ref(value: str | None, ref_dir: Path | None, refs: RefDigests):
    if value is None:
        return None, None, BASE_NEEDS_REF
    path = under(value, ref_dir)
    if not path.is_file():
        return None, None, f"ref_audio not found: {path}"
    resolved = str(path.resolve())
    try:
        return resolved, refs.digest(resolved), None
    except OSError as e:
        return None, None, f"ref_audio unreadable: {path}: {e.strerror or e}"


CHUNK = 65_536  # ids turned into Python strings at once: memory bounded at millions of rows
NULL = bytes(4)  # a null id's "digest": seed 0


def id_seed(row_id: str) -> int:
    """The seed of the row `row_id`, in [0, 2**31)."""
    digest = hashlib.blake2b(row_id.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") >> 1


def id_seeds(ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """id_seed of each id, int64 (0 for a null id), a chunk's digests read as words at once."""
    seeds = np.zeros(len(ids), dtype=np.int64)
    hashed = functools.partial(hashlib.blake2b, digest_size=4)
    for start in range(0, len(ids), CHUNK):
        chunk = ids.slice(start, CHUNK).to_pylist()
        digests = b"".join(NULL if i is None else hashed(i.encode("utf-8")).digest() for i in chunk)
        seeds[start : start + len(chunk)] = np.frombuffer(digests, dtype=">u4") >> 1
    return pa.array(seeds)


SPILL_ROWS = 1 << 19  # fewer rows than this: a few tens of MB, not worth a file


def spilled(table: pa.Table, folder: Path, column: str = "text") -> pa.Table:
    """table with `column` read from a memory-mapped copy (unchanged under SPILL_ROWS rows)."""
    if table.num_rows < SPILL_ROWS or column not in table.column_names:
        return table
    values = table[column]
    schema = pa.schema([table.schema.field(column)])
    fd, name = tempfile.mkstemp(prefix=".text-", suffix=".arrow", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f, pa.ipc.new_file(f, schema) as out:
            for chunk in values.chunks:
                out.write_batch(pa.record_batch([chunk], schema=schema))
        mapped = pa.ipc.open_file(pa.memory_map(name)).read_all()[column]
    finally:
        os.unlink(name)  # the mapping keeps the pages; nothing is left if the run is killed
    return table.set_column(table.schema.get_field_index(column), column, mapped)
