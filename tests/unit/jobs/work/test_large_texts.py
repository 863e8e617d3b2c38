"""A dataset's texts pass 2 GiB: the columns that hold them take 64-bit offsets, and taking a
chunk's rows from them works past 2**31 bytes. The text here is 2.2 GB of zero bytes that are
never touched (the pages stay virtual), so the test needs little real memory."""

from __future__ import annotations

import fakes
import numpy as np
import pyarrow as pa

from qtts.core.jobs.rows.manifest import ROW_SCHEMA
from qtts.core.jobs.state.records import RECORD_SCHEMA
from qtts.core.jobs.work.budget import FrameBudget, check_lengths
from qtts.core.jobs.work.chunks import Todo, chunk_requests

ROWS, SIZE = 2_200_000, 1000  # 2.2e9 bytes > 2**31


def _table() -> pa.Table:
    data = np.zeros(ROWS * SIZE, dtype=np.uint8)  # calloc: no page is touched
    offsets = np.arange(0, (ROWS + 1) * SIZE, SIZE, dtype=np.int64)
    text = pa.LargeStringArray.from_buffers(ROWS, pa.py_buffer(offsets), pa.py_buffer(data))
    ids = pa.array([f"r{i}" for i in range(ROWS)])
    return pa.table({"row": pa.array(np.arange(1, ROWS + 1)), "id": ids, "text": text})


def test_text_columns_have_64_bit_offsets():
    assert ROW_SCHEMA.field("text").type == pa.large_string()
    assert RECORD_SCHEMA.field("text").type == pa.large_string()


def test_chunks_and_the_length_sample_work_past_2_gib():
    rows = _table()
    assert rows["text"].nbytes > 2**31
    est = np.zeros(ROWS, dtype=np.int64)
    est[[5, ROWS - 1]] = [9, 7]  # the longest two first, then input order
    todo = Todo.of(rows, est)
    first = next(todo.slices(1000))
    assert first["id"].to_pylist()[:3] == ["r5", f"r{ROWS - 1}", "r0"]
    assert len(first["text"][0].as_py()) == SIZE
    assert sum(t.num_rows for t in todo.slices(200_000)) == ROWS  # every row, once
    model = fakes.FakeTextModel("fake")
    lengths = check_lengths(rows["text"], model, FrameBudget(2048))
    assert lengths.error.null_count == ROWS and len(lengths.tokens) == ROWS
    (req,) = chunk_requests(rows.slice(ROWS - 1).append_column(
        "speaker", pa.array(["ryan"])).append_column("language", pa.array(["auto"])).append_column(
        "instruct", pa.nulls(1, pa.string())).append_column("seed", pa.array([0])).append_column(
        "ref_audio", pa.nulls(1, pa.string())).append_column("ref_text", pa.nulls(1, pa.string())
        ).append_column("voice", pa.nulls(1, pa.string())),
        model, FrameBudget(2048)).requests  # fmt: skip
    assert req.id == f"r{ROWS - 1}" and len(req.text) == SIZE
