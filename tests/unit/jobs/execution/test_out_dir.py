"""--output and --format left out (None) mean the out dir's own, as its job file records them;
given, they win (a switch the run then repacks); a new out dir, or a job file from before the
keys, gets the defaults. Only a flag left out and kept from the out dir is logged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from qtts.core.jobs.contract.choices import AudioFormat
from qtts.core.jobs.contract.spec import OutputOptions
from qtts.core.jobs.execution.out_dir import settle_output
from qtts.core.jobs.state.jobfile import JobFile

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


def test_a_layout_a_run_took_from_the_job_file_must_still_be_recorded_under_the_lock():
    """Another task switching the out dir (given --output) while this one read the job file:
    writing the old value back would undo the switch, so the run stops and says to run again.
    A value given on the command line is this run's own switch, and goes ahead."""
    from qtts.core.errors import UsageError
    from qtts.core.jobs.execution.out_dir import check_output_unchanged

    was = JobFile("batch", "/m.parquet", layout="files", audio_format="wav")
    took = settle_output(OutputOptions("OUT", layout=None, audio_format=None), was)
    assert took.inherited == ("layout", "audio_format")
    check_output_unchanged(Path("OUT"), took, was)  # nothing changed meanwhile
    check_output_unchanged(Path("OUT"), took, BEFORE_THE_KEYS)  # nor recorded
    with pytest.raises(UsageError, match="just switched to --output webdataset by another run"):
        check_output_unchanged(Path("OUT"), took, RECORDED)
    given = settle_output(OutputOptions("OUT", layout="files", audio_format="wav"), was)
    check_output_unchanged(Path("OUT"), given, RECORDED)  # its own switch back


def test_a_recorded_layout_this_qtts_does_not_know_names_the_job_file():
    from qtts.core.errors import UsageError

    odd = JobFile("batch", "/m.parquet", layout="zip", audio_format="wav")
    with pytest.raises(UsageError, match=r"job.json records layout 'zip', which this qtts"):
        settle_output(OutputOptions("OUT", layout=None, audio_format=None), odd)
    settle_output(OutputOptions("OUT", layout="files", audio_format=None), odd)  # given: fine
