"""records.index_in, the hash table built a part of the values at a time, against pyarrow's
index_in (its twin): the same answer, first equal value included, nulls and chunks too."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from qtts.core.jobs.state.records import index_in


@pytest.mark.parametrize("part", [1, 7, 64, 1000])
@pytest.mark.parametrize("seed", range(3))
def test_parts_give_index_ins_answer(part, seed):
    rng = np.random.default_rng(seed)
    values = [f"v{i}" for i in rng.integers(0, 60, 250)]  # repeats: the first one counts
    values[rng.integers(0, 250)] = None
    keys = [None if i % 11 == 0 else f"v{i}" for i in rng.integers(0, 90, 400)]
    chunked = pa.chunked_array([values[:100], values[100:]], pa.string())
    want = pc.index_in(pa.array(keys), value_set=pa.array(values)).cast(pa.int64())
    assert index_in(pa.array(keys), chunked, part=part).equals(want)
    assert index_in(pa.chunked_array([keys[:3], keys[3:]]), pa.array(values), part=part).equals(
        want
    )


def test_no_values_finds_nothing():
    got = index_in(pa.array(["a", None]), pa.array([], pa.string()), part=4)
    assert got.null_count == 2
