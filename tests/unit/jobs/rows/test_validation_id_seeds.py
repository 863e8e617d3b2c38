"""The default seed of a row without one: derived from its id, stable on every machine and Python
(blake2b of the id's UTF-8, 4 bytes, big-endian, shifted right once: [0, 2**31)). The values below
were computed once with hashlib and are pinned: a change to the rule shows here, not as every old
out dir's rows redone."""

from __future__ import annotations

import pyarrow as pa

from qtts.core.jobs.contract.spec import RowDefaults
from qtts.core.jobs.rows.validation import id_seed, id_seeds, prepare_rows
from qtts.core.jobs.state.ref_digests import RefDigests

PINNED = {"a1": 106937569, "000001": 104059577, "utt-é": 1278914005, "": 154724242}


def test_the_seed_of_an_id_is_pinned_and_31_bits():
    assert {i: id_seed(i) for i in PINNED} == PINNED
    ids = pa.array([*PINNED, None, "a1"], pa.string())
    seeds = id_seeds(ids).to_pylist()
    assert seeds[:4] == list(PINNED.values()) and seeds[5] == PINNED["a1"]
    assert seeds[4] == 0  # a null id fails its row anyway
    assert all(0 <= s < 2**31 for s in seeds)


def test_id_seeds_spans_chunks():
    ids = [f"row-{i}" for i in range(70_000)]  # more than one chunk of ids hashed at once
    got = id_seeds(pa.chunked_array([ids[:100], ids[100:]])).to_pylist()
    assert got[::9_999] == [id_seed(i) for i in ids[::9_999]] and len(set(got)) > 69_990


def _prepared(defaults: RowDefaults, tmp_path) -> list[int]:
    import fakes

    from qtts.core.jobs.rows.manifest import ROW_SCHEMA

    schema = ROW_SCHEMA.set(ROW_SCHEMA.get_field_index("seed"), pa.field("seed", pa.int64()))
    rows = [{"row": k, "id": i, "text": "same text"} for k, i in ((1, "a1"), (2, "b2"))]
    rows.append({"row": 3, "id": "c3", "text": "same text", "seed": 3})
    prepared = prepare_rows(pa.Table.from_pylist(rows, schema=schema),
                            fakes.FakeTextModel("fake"), defaults, ref_dir=None,
                            refs=RefDigests(tmp_path))  # fmt: skip
    return prepared.rows["seed"].to_pylist()


def test_a_row_without_a_seed_draws_by_its_id_unless_seed_is_given(tmp_path):
    """Neither the row's seed nor --seed: its id's seed, so rows of the same text and voice
    differ. --seed N: N. The row's own seed wins over both."""
    assert _prepared(RowDefaults("vivian"), tmp_path) == [id_seed("a1"), id_seed("b2"), 3]
    assert _prepared(RowDefaults("vivian", seed=7), tmp_path) == [7, 7, 3]
