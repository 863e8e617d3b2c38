"""Reading a row's audio back from its location: plain files by path, members from their shard,
in the order the shards hold them."""

from __future__ import annotations

import pyarrow as pa
from store_rows import archive_store, row

from qtts.core.jobs.output.stores.member_reader import MemberReader
from qtts.core.jobs.state.journal import Journal, read_journals


def _shard(out, layout, ids):
    journal = Journal(out / "j.jsonl")
    store = archive_store(out, layout, journal, shard_rows=100)
    for k, i in enumerate(ids):
        store.submit(row(i, seed=k)).result()
    store.close()
    records, _ = read_journals([journal.path])
    return dict(zip(records["id"].to_pylist(), records["file"].to_pylist(), strict=True))


def test_members_read_back_byte_for_byte_in_shard_order(tmp_path):
    for layout in ("webdataset", "parquet"):
        out = tmp_path / layout
        where = _shard(out, layout, ["c", "a.1", "b"])  # written in completion order
        (out / "x.wav").write_bytes(b"RIFF")
        reader = MemberReader(out)
        locations = pa.array([where["a.1"], where["b"], "x.wav", where["c"]])
        assert reader.order(locations).tolist() == [2, 3, 0, 1]  # the file, then c, a.1, b
        assert reader.order(pa.array(["x.wav", "y.wav"])).tolist() == [0, 1]  # files: as given
        assert reader.source("x.wav") == out / "x.wav"
        data = reader.source(where["b"])().read()
        assert data[:4] == b"RIFF" and len(data) == 44 + 2 * 2400
