"""Rows no Ray unit returned (a lost unit) fail on the driver, as a store would fail them: in the
files layout an earlier run's audio and codes of such a row go before its failed record. No Ray:
the driver's bookkeeping alone."""

from __future__ import annotations

import pyarrow as pa

from qtts.core.jobs.execution.ray_backend import RayBackend
from qtts.core.jobs.output.recorder import RecordContext
from qtts.core.jobs.output.stores.open_store import StoreSpec
from qtts.core.jobs.state.journal import Journal, read_journals
from qtts.core.jobs.state.paths import StatePaths
from qtts.core.jobs.state.records import ROW_FIELDS


def _rows(ids: list[str]) -> pa.Table:
    columns = {f: pa.nulls(len(ids), pa.string()) for f in ROW_FIELDS}
    columns |= {"id": pa.array(ids), "row": pa.array(range(1, len(ids) + 1), pa.int64())}
    return pa.table(columns)


def test_a_lost_row_fails_and_its_earlier_files_go(tmp_path):
    out = tmp_path / "out"
    StatePaths(out).dir.mkdir(parents=True)
    for name in ("lost.wav", "lost.flac", "lost.codes.npy", "back.wav"):
        (out / name).write_bytes(b"an earlier run's")
    backend = RayBackend(None, False, 1, 0.0, {"out_dir": str(out)}, 1)
    journal = Journal(StatePaths(out).journal(""))
    ctx = RecordContext("digest", "model", "run-1", "ok", store=StoreSpec())
    outcomes = list(backend._missing(_rows(["lost", "back"]), [pa.array(["back"])], journal, ctx))
    assert [(o.id, o.status) for o in outcomes] == [("lost", "failed")]
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["back.wav"]
    records, _ = read_journals([StatePaths(out).journal("")])
    assert records.select(["id", "status"]).to_pylist() == [{"id": "lost", "status": "failed"}]


def test_an_archive_layouts_lost_row_touches_no_file(tmp_path):
    """Its members left their shards before the run: nothing of it sits at the top."""
    out = tmp_path / "out"
    StatePaths(out).dir.mkdir(parents=True)
    (out / "lost.wav").write_bytes(b"not this layout's")
    backend = RayBackend(None, False, 1, 0.0, {"out_dir": str(out)}, 1)
    ctx = RecordContext("digest", "model", "run-1", "ok", store=StoreSpec(layout="webdataset"))
    journal = Journal(StatePaths(out).journal(""))
    assert [o.status for o in backend._missing(_rows(["lost"]), [], journal, ctx)] == ["failed"]
    assert (out / "lost.wav").exists()
