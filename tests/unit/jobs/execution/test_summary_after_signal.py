"""The summary after SIGTERM counts what the run made: rows whose files were still being written
when the signal came are journalled as they finish, and count in `audio_s` as they do in `ok`."""

from __future__ import annotations

import os
import signal
import time

import fakes
import pyarrow.parquet as pq
import pytest

from qtts.core.jobs.contract.spec import JobSpec, OutputOptions, RowDefaults, VoiceOptions
from qtts.core.jobs.execution.run import run_job
from qtts.core.jobs.output import writer  # the files layout encodes through it


class StoppedAfterAll(fakes.FakeSynthesizer):
    """Every row synthesized, then SIGTERM, while their files are still being written."""

    def synthesize(self, requests, options):
        yield from super().synthesize(requests, options)
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture
def slow_writes(monkeypatch):
    encode = writer.encode_audio

    def slow(*args):
        time.sleep(0.3)  # the rows are still being written when the signal comes
        return encode(*args)

    monkeypatch.setattr(writer, "encode_audio", slow)


@pytest.fixture
def keep_sigterm():
    """The job leaves a second signal's exit-at-once handler behind: not for pytest."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_rows_written_after_sigterm_count_their_audio(
    tmp_path, write_manifest, slow_writes, keep_sigterm
):
    m = write_manifest([{"id": f"u{i}", "text": f"sentence number {i}"} for i in range(3)])
    spec = JobSpec(
        kind="batch",
        source=str(m),
        output=OutputOptions(tmp_path / "out"),
        voice=VoiceOptions(RowDefaults(speaker="ryan")),
    )
    s = run_job(spec, fakes.open_text_model, lambda *a: StoppedAfterAll(), env={})
    assert (s.status, s.exit_code, s.ok, s.pending) == ("interrupted", 143, 3, 0)
    made = pq.read_table(tmp_path / "out" / "results.parquet", columns=["duration_s"])
    assert s.audio_s == pytest.approx(sum(made["duration_s"].to_pylist())) and s.audio_s > 0
