"""A big job's texts, memory-mapped from an unlinked file: the same values, nothing left in the
folder, and the texts no longer on Arrow's heap."""

from __future__ import annotations

import pyarrow as pa

from qtts.core.jobs.rows import validation as text_spill  # spilled there


def test_texts_are_mapped_and_the_file_is_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(text_spill, "SPILL_ROWS", 10)
    texts = pa.chunked_array([[f"sentence {i} " * 20 for i in range(500)], ["last", None]],
                             pa.large_string())  # fmt: skip
    table = pa.table({"id": [str(i) for i in range(502)], "text": texts})
    want = table.to_pylist()
    heap = pa.total_allocated_bytes()
    got = text_spill.spilled(table, tmp_path)
    del table, texts
    assert got.to_pylist() == want and got.schema.field("text").type == pa.large_string()
    assert list(tmp_path.iterdir()) == []
    assert pa.total_allocated_bytes() < heap - 500 * 200  # the texts left the heap


def test_small_tables_stay_as_they_are(tmp_path):
    table = pa.table({"text": pa.array(["a", "b"], pa.large_string())})
    assert text_spill.spilled(table, tmp_path) is table
