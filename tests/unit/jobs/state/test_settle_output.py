"""--output and --format left out (None) mean the out dir's own, as its job file records them;
given, they win (a switch the run then repacks); a new out dir, or a job file from before the
keys, gets the defaults. Only a flag left out and kept from the out dir is logged."""

from __future__ import annotations

import logging

import pytest

from qtts.core.jobs.contract.choices import AudioFormat
from qtts.core.jobs.contract.spec import OutputOptions
from qtts.core.jobs.state.jobfile import JobFile, settle_output

RECORDED = JobFile("batch", "/m.parquet", layout="webdataset", audio_format="flac")
BEFORE_THE_KEYS = JobFile("batch", "/m.parquet")


@pytest.mark.parametrize(
    ("given", "recorded", "want"),
    [
        ((None, None), RECORDED, ("webdataset", AudioFormat.flac)),
        ((None, None), None, ("files", AudioFormat.wav)),
        ((None, None), BEFORE_THE_KEYS, ("files", AudioFormat.wav)),
        (("parquet", None), RECORDED, ("parquet", AudioFormat.flac)),
        ((None, "wav"), RECORDED, ("webdataset", AudioFormat.wav)),
        (("files", "wav"), RECORDED, ("files", AudioFormat.wav)),
    ],
)
def test_a_flag_left_out_is_the_out_dirs_own(given, recorded, want):
    layout, audio_format = given
    out = OutputOptions("OUT", layout=layout, audio_format=audio_format)
    settled = settle_output(out, recorded)
    assert (settled.layout, settled.audio_format) == want
    assert settled.out_dir == out.out_dir and settled.shard_rows == out.shard_rows


def test_only_what_is_kept_from_the_out_dir_is_said(caplog):
    with caplog.at_level(logging.INFO, logger="qtts"):
        settle_output(OutputOptions("OUT", layout=None, audio_format=None), RECORDED)
        settle_output(OutputOptions("OUT", layout="parquet", audio_format="wav"), RECORDED)
        settle_output(OutputOptions("OUT", layout=None, audio_format=None), None)
    kept = [r.getMessage() for r in caplog.records]
    said = "--output webdataset, --format flac: as OUT holds them (pass another to repack)"
    assert kept == [said]
