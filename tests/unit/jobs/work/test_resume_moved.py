"""The resume scan's rows to repack (core/jobs/work/resume.py, `moved`): a finished row whose audio
sits in another layout or format is done but moved, never stale, when its inputs and settings
are this run's but for the format, its audio is there as recorded and its codes too where they
are asked for; anything else about it is redone as before. Crafted records and listings."""

from __future__ import annotations

import pyarrow as pa

from qtts.core.jobs.contract.spec import OutputOptions
from qtts.core.jobs.output.stores.presence import Listing
from qtts.core.jobs.state.records import INPUT_FIELDS
from qtts.core.jobs.work.fingerprint import format_twins
from qtts.core.jobs.work.resume import scan

CURRENT = {"model": "m", "talker": {"temperature": 0.9}, "format": "wav"}
REGISTRY = {
    "now": CURRENT,
    "as-flac": {**CURRENT, "format": "flac"},
    "hotter": {**CURRENT, "talker": {"temperature": 0.7}, "format": "flac"},
}
# id -> (file, bytes, settings, codes_saved)
ROWS = {
    "plain": ("plain.wav", 10, "now", True),  # files layout -> moved into the archive
    "flac": ("flac.flac", 10, "as-flac", False),  # another format, as a file -> moved
    "member": ("data/a.tar#member.wav", 10, "now", False),  # in this layout already: done
    "flac_member": ("data/a.tar#flac_member.flac", 10, "as-flac", False),  # transcode: moved
    "hotter": ("hotter.flac", 10, "hotter", False),  # another temperature: redone
    "gone": ("gone.wav", 10, "now", False),  # not in the out dir: redone
    "resized": ("resized.wav", 99, "now", False),  # not as recorded: redone
}
LISTED = {"plain.wav": 10, "flac.flac": 10, "data/a.tar": None, "hotter.flac": 10,
          "resized.wav": 10, "plain.codes.npy": 5}  # fmt: skip


def _scan(*, layout="webdataset", save_codes=False, listed=LISTED):
    ids = list(ROWS)
    inputs = {name: pa.nulls(len(ids), pa.string()) for name in INPUT_FIELDS}
    inputs["text_digest"] = pa.array(range(len(ids)), pa.int64())
    inputs["seed"] = pa.array([7] * len(ids), pa.int64())
    valid = pa.table({"id": ids, **inputs})
    file, size, settings, codes = (list(column) for column in zip(*ROWS.values(), strict=True))
    records = pa.table({"id": ids, "status": ["ok"] * len(ids), "file": file, "bytes": size,
                        "settings": settings, "codes_saved": codes, **inputs})  # fmt: skip
    names = pa.array(list(listed), pa.string())
    listing = Listing(pa.table({"name": names, "size": pa.array(list(listed.values()),
                                                                pa.int64())}))  # fmt: skip
    output = OutputOptions("out", layout=layout, save_codes=save_codes)  # wav
    got = scan(valid, records, listing, settings="now", output=output, registry=REGISTRY,
               current=CURRENT)  # fmt: skip
    moved = {i for i, m in zip(ids, got.moved, strict=True) if m}
    done = {i for i, d in zip(ids, got.done, strict=True) if d}
    return moved, done - moved, set(got.stale.to_pylist()), got.reasons


def test_rows_in_another_layout_or_format_are_moved_not_redone():
    moved, done, stale, reasons = _scan()
    assert moved == {"plain", "flac", "flac_member"}
    assert done == {"member"}
    assert stale == {"hotter", "gone", "resized"}
    assert "format flac -> wav, talker.temperature 0.7 -> 0.9" in reasons
    assert reasons["file missing or not as recorded"] == 2  # gone, resized


def test_codes_asked_for_must_be_there_to_move_a_row():
    moved, done, stale, _ = _scan(save_codes=True)
    assert moved == {"plain"}  # its codes file is listed; the others saved none
    assert {"flac", "flac_member", "member"} <= stale and done == set()
    without = {k: v for k, v in LISTED.items() if k != "plain.codes.npy"}
    moved, _, stale, _ = _scan(save_codes=True, listed=without)
    assert "plain" in stale


def test_back_to_files_moves_the_archived_rows_and_keeps_the_files():
    moved, done, stale, _ = _scan(layout="files")
    assert moved == {"flac", "member", "flac_member"}
    assert done == {"plain"} and stale == {"hotter", "gone", "resized"}


def test_format_twins_differ_in_the_format_alone():
    assert format_twins(REGISTRY, CURRENT) == ["as-flac"]
    assert format_twins({"x": "not settings", **REGISTRY}, {**CURRENT, "format": "flac"}) == ["now"]


def test_a_row_in_another_format_without_its_codes_is_redone_for_its_codes():
    """Another format alone would only move it: the reason it is redone is its codes."""
    _, _, stale, reasons = _scan(save_codes=True)
    assert {"member", "flac", "flac_member"} <= stale
    assert reasons["codes missing (--save-codes packs them with each row's audio)"] == 3
    assert "format flac -> wav" not in reasons


def test_presence_taken_a_slice_at_a_time_is_the_same(monkeypatch):
    """A small listing (an archive layout's: a name per shard) lets the scan take the recorded
    locations a slice at a time: the answer is the one taken at once."""
    from qtts.core.jobs.work import resume

    at_once = [_scan(layout=layout, save_codes=codes) for layout in ("files", "webdataset")
               for codes in (False, True)]  # fmt: skip
    monkeypatch.setattr(resume, "COMPARE_SLICE", 2)
    sliced = [_scan(layout=layout, save_codes=codes) for layout in ("files", "webdataset")
              for codes in (False, True)]  # fmt: skip
    assert sliced == at_once
