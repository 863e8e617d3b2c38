"""WebDataset shards: the reversible key rule, and the webdataset library reading them with no
options."""

from __future__ import annotations

import io
import json

import pytest
import soundfile as sf

from qtts.core.jobs.output.stores.archive import ArchiveShard
from qtts.core.jobs.output.stores.formats import webdataset
from qtts.core.jobs.output.stores.formats.webdataset import TarShardWriter, id_of_key, key_of_id

HOSTILE = ["plain", "book1.ch2", "a.b.c", "100%", "50%2E", "%252E", "x%y.z", "ünï.cödé", "#1"]


@pytest.mark.parametrize("row_id", HOSTILE)
def test_key_rule_is_reversible_and_dot_free(row_id):
    key = key_of_id(row_id)
    assert "." not in key and id_of_key(key) == row_id


def test_plain_ids_keep_their_name():
    assert key_of_id("utt_0001-a") == "utt_0001-a"


def _shard(path, ids, codes=False):
    with open(path, "wb") as f:
        w = TarShardWriter(f)
        for i, row_id in enumerate(ids):
            audio = io.BytesIO()
            sf.write(audio, [0.1 * (i + 1)] * 240, 24000, subtype="PCM_16", format="WAV")
            record = {"id": row_id, "text": f"t{i}", "duration_s": 0.01}
            w.add(row_id, audio.getvalue(), "wav", b"npy" if codes else None, record)
        w.close()


def test_webdataset_reads_the_samples_back_with_no_options(tmp_path):
    wds = pytest.importorskip("webdataset")
    _shard(tmp_path / "s-000000.tar", HOSTILE, codes=True)
    samples = list(wds.WebDataset(str(tmp_path / "s-000000.tar"), shardshuffle=False))
    assert [s["__key__"] for s in samples] == [key_of_id(i) for i in HOSTILE]
    for sample, row_id in zip(samples, HOSTILE, strict=True):
        assert {"wav", "json", "codes.npy"} <= set(sample)
        assert json.loads(sample["json"])["id"] == row_id == id_of_key(sample["__key__"])


def test_copy_without_drops_whole_samples(tmp_path):
    _shard(tmp_path / "a.tar", ["r1", "r.2", "r3"], codes=True)
    with open(tmp_path / "b.tar", "wb") as f:
        kept = webdataset.copy_without(webdataset.SHARD, tmp_path / "a.tar", f, {"r.2"})
    assert kept == 2 and webdataset.keys_in(webdataset.SHARD, tmp_path / "b.tar") == ["r1", "r3"]
    shard = ArchiveShard(webdataset.FORMAT, tmp_path, "b")
    assert webdataset.durations(shard) == {"r1": 0.01, "r3": 0.01}
