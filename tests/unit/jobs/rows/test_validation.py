"""Row validation over columns: defaults, voices, seeds, references, lengths against the budget."""

from __future__ import annotations

import fakes
import numpy as np
import pyarrow as pa
import pytest

from qtts.core.jobs.contract.spec import RowDefaults
from qtts.core.jobs.rows.manifest import ROW_SCHEMA, read_manifest
from qtts.core.jobs.rows.validation import _distinct_rows, prepare_rows
from qtts.core.jobs.state.ref_digests import RefDigests
from qtts.core.jobs.work.budget import FrameBudget, check_lengths
from qtts.core.jobs.work.chunks import chunk_requests


def _table(rows: list[dict]) -> pa.Table:
    full = [{"row": i + 1, "id": f"r{i + 1}", "text": "hello there", **r}
            for i, r in enumerate(rows)]  # fmt: skip
    seeds = [r.get("seed") for r in full]
    schema = ROW_SCHEMA if any(isinstance(s, float) for s in seeds) else ROW_SCHEMA.set(
        ROW_SCHEMA.get_field_index("seed"), pa.field("seed", pa.int64()))  # fmt: skip
    return pa.Table.from_pylist(full, schema=schema)


def _validate(rows, model="fake", budget=FrameBudget(2048), defaults=RowDefaults("vivian"),
              tmp=None, **kw):  # fmt: skip
    """(valid rows by id, {id: reason}) after the row checks and the length check."""
    tm = fakes.FakeTextModel(model)
    prepared = prepare_rows(_table(rows), tm, defaults, refs=RefDigests(tmp or _nowhere()), **kw)
    valid = prepared.valid()
    lengths = check_lengths(valid["text"], tm, budget)
    reasons = {r["id"]: r["error"] for r in prepared.rejected().to_pylist()}
    good = {}
    for r, error in zip(valid.to_pylist(), lengths.error.to_pylist(), strict=True):
        if error:
            reasons[r["id"]] = error
        else:
            good[r["id"]] = r
    return good, reasons, prepared


def _nowhere():
    from pathlib import Path

    return Path("/nonexistent-qtts-test-dir")


def test_valid_row_takes_defaults_and_budget():
    good, reasons, _ = _validate([{"language": "English", "seed": 5}], ref_dir=None)
    assert reasons == {}
    row = good["r1"]
    assert (row["speaker"], row["language"], row["seed"], row["row"]) == ("vivian", "english", 5, 1)
    (req,) = chunk_requests(pa.Table.from_pylist([row]), fakes.FakeTextModel("fake"),
                            FrameBudget(2048)).requests  # fmt: skip
    assert req.max_new_tokens == FrameBudget(2048).max_new_tokens(2)


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"text": "   "}, "empty text"),
        ({"text": None}, "text is null"),
        ({"id": "../x"}, "unsafe id"),
        ({"id": None}, "id is null"),
        ({"speaker": "nobody"}, "unknown speaker 'nobody'; this model has: eric, ryan, vivian"),
        ({"language": "klingon"}, "unknown language 'klingon'"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"seed": -1.0}, "seed must be in"),
        ({"text": " ".join(["w"] * 2000)}, "text too long for the frame budget"),
    ],
)
def test_bad_rows_fail_with_reasons(fields, reason):
    good, reasons, prepared = _validate([fields, {"id": "ok"}], ref_dir=None)
    assert list(good) == ["ok"]
    ((_, message),) = reasons.items()
    assert reason in message


def test_integer_seed_out_of_range():
    _, reasons, _ = _validate([{"seed": -1}], ref_dir=None)
    assert "seed must be in [0, 2**63 - 1], got -1" in reasons["r1"]
    _, reasons, _ = _validate([{"seed": 1e23}], ref_dir=None)  # a CSV's 99999999999999999999999
    assert reasons["r1"].endswith("got 1e+23")


def test_explicit_budget_is_exact_and_never_too_long():
    long = " ".join(["w"] * 2000)
    good, reasons, _ = _validate([{"text": long}], budget=FrameBudget(2048, explicit=7),
                                 ref_dir=None)  # fmt: skip
    (req,) = chunk_requests(pa.Table.from_pylist(list(good.values())),
                            fakes.FakeTextModel("fake"), FrameBudget(2048, 7)).requests  # fmt: skip
    assert reasons == {} and req.max_new_tokens == 7


def test_base_model_needs_reference_audio(tmp_path):
    (tmp_path / "ref.wav").write_bytes(b"RIFF")
    rows = [{"id": "a"}, {"id": "b", "ref_audio": "gone.wav"},
            {"id": "c", "ref_audio": "ref.wav", "ref_text": "words"}]  # fmt: skip
    good, reasons, _ = _validate(rows, model="fake-base", defaults=RowDefaults(), ref_dir=tmp_path)
    assert "missing ref_audio" in reasons["a"] and "ref_audio not found" in reasons["b"]
    (row,) = good.values()
    assert row["ref_audio"] == str((tmp_path / "ref.wav").resolve()) and row["ref_text"] == "words"
    assert len(row["ref_digest"]) == 32  # the clip's content, not its path


def test_warnings_are_counted_once_per_message():
    good, _, prepared = _validate([{"id": f"r{i}", "instruct": "happy"} for i in range(3)],
                                  model="fake-0.6b", ref_dir=None)  # fmt: skip
    assert all(r["instruct"] is None for r in good.values())
    assert list(prepared.warnings.values()) == [3]


def test_float_seed_column_values(write_manifest):
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("seed", pa.float64())])
    rows = [{"id": "a", "text": "x", "seed": 2.0}, {"id": "b", "text": "y", "seed": float("nan")}]
    path = write_manifest(rows, schema=schema)
    prepared = prepare_rows(read_manifest(str(path)), fakes.FakeTextModel("fake"),
                            RowDefaults("vivian", seed=9), ref_dir=None,
                            refs=RefDigests(_nowhere()))  # fmt: skip
    assert prepared.rows["seed"].to_pylist() == [2, 9]


def test_voice_check_runs_once_per_distinct_voice():
    tm = fakes.FakeTextModel("fake")
    calls = []
    real = tm.normalize_row
    tm.normalize_row = lambda *a: calls.append(a) or real(*a)
    rows = [{"speaker": ["ryan", "eric", None][i % 3]} for i in range(300)]
    prepare_rows(_table(rows), tm, RowDefaults("vivian"), ref_dir=None, refs=RefDigests(_nowhere()))
    assert sorted(calls) == [("eric", "auto", None), ("ryan", "auto", None),
                             ("vivian", "auto", None)]  # fmt: skip


class CountingModel(fakes.FakeTextModel):
    def __init__(self):
        super().__init__("fake")
        self.counted = 0

    def count_text_tokens(self, texts):
        self.counted += len(texts)
        return super().count_text_tokens(texts)


def test_lengths_tokenize_only_rows_that_could_be_too_long():
    model = CountingModel()
    texts = [f"row {i} speaks a short sentence" for i in range(5000)] + [" ".join(["w"] * 2000)]
    lengths = check_lengths(pa.array(texts), model, FrameBudget(2048))
    assert model.counted < 1100  # the sample and the long row, not all 5,001
    assert lengths.error.to_pylist()[-1].startswith("text too long")
    assert lengths.error.null_count == 5000
    exact = np.array(model.count_text_tokens(texts))
    assert np.abs(lengths.tokens - exact).max() <= 1  # estimated from this job's tokens per byte


def test_distinct_voices_by_one_key_match_numpys_unique_rows():
    """The fast path (one int64 key per row) gives the distinct tuples, in order, and each row's
    index among them, exactly as its twin (np.unique over rows, taken where keys would overflow)."""
    rng = np.random.default_rng(7)
    dims = (5, 3, 7)
    codes = tuple(rng.integers(0, d, 1000) for d in dims)
    fast = _distinct_rows(codes, dims)
    slow = _distinct_rows(codes, (2**31, 2**31, 2**31))  # the product overflows: the twin runs
    assert fast[0] == slow[0] and np.array_equal(fast[1], slow[1])
    assert len(fast[0]) < len(codes[0])  # tuples repeat: each row is not its own voice
    assert [fast[0][i] for i in fast[1]] == [list(t) for t in zip(*codes, strict=True)]
    assert _distinct_rows((np.zeros(0, np.int64),) * 3, (0, 0, 0))[0] == []
