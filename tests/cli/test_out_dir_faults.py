"""An out dir that fails under the job: a full disk names the file it could not write, and an
unreadable state never turns good results.parquet and metadata.jsonl into empty ones. Fake
model, in process."""

from __future__ import annotations

import errno
import os

import pyarrow.parquet as pq
import pytest
from cli_calls import qtts

from qtts.core.jobs.output import views as results  # the views are written there
from qtts.core.jobs.state import atomic_files, jobfile

pytestmark = pytest.mark.usefixtures("fake_model")
FULL = os.strerror(errno.ENOSPC)


def full_disk(final, data, *rest):
    """atomic_write_bytes on a full disk: the write itself fails, naming no file."""

    def write(f):
        raise OSError(errno.ENOSPC, FULL)

    atomic_files.atomic_write(final, write, *rest)


@pytest.fixture
def done(tmp_path, write_manifest):
    m = write_manifest([{"id": f"u{i}", "text": f"line {i}"} for i in range(3)])
    out = tmp_path / "out"
    assert qtts("batch", m, "-o", out, "--speaker", "ryan").exit_code == 0
    return m, out


def views(out) -> tuple[int, bytes]:
    return pq.read_table(out / "results.parquet").num_rows, (out / "metadata.jsonl").read_bytes()


def test_a_full_disk_names_the_job_file(tmp_path, write_manifest, monkeypatch):
    monkeypatch.setattr(jobfile, "atomic_write_bytes", full_disk)
    out = tmp_path / "out"
    r = qtts("batch", write_manifest([{"id": "a", "text": "x"}]), "-o", out, "--speaker", "ryan")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == f"Error: {FULL}: {out / '.qtts' / 'job.json'}"


def test_qtts_results_on_a_full_disk_names_the_file_and_keeps_the_views(done, monkeypatch):
    _, out = done
    before = views(out)

    def results_on_a_full_disk(final, write, *rest):
        def fails_at_the_end(f):
            write(f)
            raise OSError(errno.ENOSPC, FULL)  # the fsync of results.parquet, say

        atomic_files.atomic_write(final, fails_at_the_end, *rest)

    monkeypatch.setattr(results, "atomic_write", results_on_a_full_disk)
    r = qtts("results", out)
    assert r.exit_code == 1 and r.stderr.strip().splitlines()[-1].startswith(f"Error: {FULL}: ")
    assert str(out / "metadata.jsonl") in r.stderr or str(out / "results.parquet") in r.stderr
    assert views(out) == before


def test_an_unreadable_state_keeps_the_last_good_views(done):
    m, out = done
    before = views(out)
    assert before[0] == 3
    state = out / ".qtts" / "state.parquet"
    state.write_bytes(b"not parquet")
    r = qtts("results", out)
    assert r.exit_code == 1 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"Error: the job state {state} is unreadable (")
    assert line.endswith("results.parquet and metadata.jsonl are kept as they were")
    assert views(out) == before
    # A run of the shard reads it leniently: its rows are redone, and the views come back.
    r = qtts("batch", m, "-o", out, "--speaker", "ryan")
    assert r.exit_code == 0 and "is unreadable" in r.stderr
    assert views(out)[0] == 3 and qtts("results", out).exit_code == 0
