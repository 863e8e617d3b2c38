"""The out dir's listing: one pass over the folder in batches, every file kept with its size (or
without, when only names are asked for), and this run's temp files told apart."""

from __future__ import annotations

from qtts.core.jobs.output.stores import presence as listing_module
from qtts.core.jobs.output.stores.presence import list_out_dir


def test_a_listing_keeps_every_file_across_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(listing_module, "BATCH", 7)
    for i in range(30):
        (tmp_path / f"f{i}.wav").write_bytes(b"x" * i)
    (tmp_path / ".f1.wav.qtts-tmp-9-1").write_bytes(b"half")
    (tmp_path / ".qtts").mkdir()
    full, names_only = list_out_dir(tmp_path), list_out_dir(tmp_path, sizes=False)
    sizes = dict(zip(full.files["name"].to_pylist(), full.files["size"].to_pylist(), strict=True))
    assert sizes == {f"f{i}.wav": i for i in range(30)} and full.temps == [".f1.wav.qtts-tmp-9-1"]
    assert sorted(names_only.names().to_pylist()) == sorted(sizes)
    assert names_only.files["size"].null_count == 30
