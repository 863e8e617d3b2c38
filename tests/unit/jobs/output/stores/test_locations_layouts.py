"""Which layout made each location: one byte a row (dictionary-encoded), the names as before."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from qtts.core.jobs.output.stores.presence import layouts


def test_each_location_names_its_layout():
    locations = pa.chunked_array(
        [
            [None, "a.b.wav", "data/x-000001.tar#a%2Eb.wav"],
            ["data/y-000002.parquet#c.flac", "d.flac"],
        ]
    )
    got = layouts(locations)
    assert got.to_pylist() == [None, "files", "webdataset", "parquet", "files"]
    assert pa.types.is_dictionary(got.type) and got.indices.type == pa.int8()
    assert pc.equal(got, "files").to_pylist() == [None, True, False, False, True]
    assert layouts(pa.array([], pa.string())).to_pylist() == []
