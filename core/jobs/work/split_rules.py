"""The split settings' rules: the segment limit a job runs with, settled against the model's
frame budget (a limit the user gave and the model cannot speak is refused; the default is lowered
to one it can, in one log line), and their resume rule, decided on record columns and a regex, so
a rerun tokenizes nothing (docs/job-state.md, "The fingerprint and the resume rule").
Knows the split options, the budget rules and record columns; no files, no tensors."""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.errors import UsageError
from qtts.core.jobs.contract.interfaces import TextModel
from qtts.core.jobs.contract.spec import SplitOptions
from qtts.core.jobs.long_text.segments import cut_rows
from qtts.core.jobs.state.records import as_bools, combined
from qtts.core.jobs.work.budget import FrameBudget, count_tokens
from qtts.core.jobs.work.resume import ResumeScan

log = logging.getLogger("qtts")


def settle_segment_limit(split: SplitOptions, budget: FrameBudget) -> SplitOptions:
    """split with its limit set: the one given (UsageError when a segment that long does not fit
    the budget), or the default lowered to the longest segment that does."""
    if not split.enabled:
        return split
    given = split.max_segment_tokens
    if given is not None:
        why = budget.too_long(given)
        if why is not None:
            raise UsageError(
                f"--max-segment-tokens {given} is more than this model can speak in one "
                f"segment ({_numbers(why)}); lower it"
            )
        return split
    default = split.limit
    fits = next((n for n in range(default, 0, -1) if budget.too_long(n) is None), None)
    if fits is None:
        raise UsageError(
            f"this model cannot speak even a one-token segment ({_numbers(budget.too_long(1))})"
        )
    if fits < default:
        log.info(
            "--max-segment-tokens %d: the default %d is more than this model can speak in one "
            "segment (%s); set --max-segment-tokens to choose",
            fits,
            default,
            _numbers(budget.too_long(default)),
        )
    return replace(split, max_segment_tokens=fits)


def _numbers(why: str) -> str:
    """A too_long reason's numbers, without its label and advice."""
    return why.split(": ", 1)[-1].split("; ")[0]


# Text that may hold two sentences: a sentence end (split_text's terminators, in RE2) with a
# letter or digit anywhere after it. Broader than the splitter on purpose (no abbreviation or
# case rule, any space after a full stop): a flagged text is only looked at, the cut decides.
# Python's \s, which the splitter uses, is wider than RE2's: the \p{Z} and control spaces add it.
_ANY_SPACE = r"[\s\p{Z}\x{1c}-\x{1f}\x{85}]"
_SENTENCE_INSIDE = (
    rf"(?s)(?:[。！？；｡।॥؟۔։።။\x{{037e}}\n]|[.!?…‼⁇⁈⁉][^\pL\pN]*?{_ANY_SPACE}).*[\pL\pN]"
)
# Flagged texts cut at once: bounded memory when --split sentence flags a million rows.
LOOK_BATCH = 65_536


def recheck_split(
    resume: ResumeScan, valid: pa.Table, records: pa.Table, split: SplitOptions, model: TextModel
) -> ResumeScan:
    """resume with the done rows this run would cut differently moved to stale, with a reason."""
    at = np.flatnonzero(resume.done)
    if len(at) == 0 or resume.record_at is None:
        return resume
    index = resume.record_at.take(pa.array(at))
    # The usual rerun, decided on booleans: no copy of ten million keys. No key: kept as made.
    if pc.all(pc.fill_null(pc.equal(records["split"], split.key), True).take(index)).as_py():
        return resume
    keys = combined(pc.fill_null(records["split"].take(index), split.key))
    whole = as_bools(pc.less_equal(records["segments"].take(index), 1))
    tokens = records["text_tokens"].take(index)
    encoded = pc.dictionary_encode(keys)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    alike = np.ones(len(at), dtype=bool)
    reasons: dict[str, int] = {}
    for code, key in enumerate(encoded.dictionary.to_pylist()):
        if key == split.key:
            continue
        mine = codes == code
        changed = mine & ~whole
        check = np.flatnonzero(mine & whole)
        if len(check) and not _whole_by_settings(SplitOptions.from_key(key), split):
            texts = valid["text"].take(pa.array(at[check]))
            changed[check] = ~_stays_whole(texts, tokens.take(pa.array(check)), split, model)
        alike &= ~changed
        if n := int(changed.sum()):
            reasons[f"split {key} -> {split.key}"] = n
    if alike.all():
        return resume
    return resume.redo(at[~alike], valid["id"], reasons)


def _whole_by_settings(old: SplitOptions, new: SplitOptions) -> bool:
    """A row `old` left whole, `new` leaves whole too, whatever its text."""
    same_cut = old.enabled and (old.mode, old.limit) == (new.mode, new.limit)
    longer_auto = old.mode == new.mode == "auto" and new.limit >= old.limit
    return not new.enabled or same_cut or longer_auto


def _stays_whole(
    texts: pa.Array | pa.ChunkedArray,
    tokens: pa.Array | pa.ChunkedArray,
    split: SplitOptions,
    model: TextModel,
) -> np.ndarray:
    """Whether `split` leaves each text whole, by its recorded token count (none: taken as cut)."""
    whole = as_bools(pc.less_equal(tokens, split.limit))
    if split.mode != "sentence" or not whole.any():
        return whole
    flagged = np.flatnonzero(whole & as_bools(pc.match_substring_regex(texts, _SENTENCE_INSIDE)))
    for i in range(0, len(flagged), LOOK_BATCH):  # a sentence end inside: the cut decides
        part = flagged[i : i + LOOK_BATCH]
        looked = texts.take(pa.array(part)).to_pylist()
        cuts = cut_rows(
            looked, count_tokens(model, looked).tolist(), partial(count_tokens, model), split
        )
        whole[part] = [len(c) == 1 for c in cuts]
    return whole
