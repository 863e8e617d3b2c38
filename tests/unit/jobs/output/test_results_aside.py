"""Views built aside by `qtts results` (a results lock nobody can open): a folder a killed reader
left in OUT/.qtts is removed by the next reader, never one a live reader holds or has only just
made."""

from __future__ import annotations

import os
import time

from qtts.core.jobs.output.results import (
    ASIDE_PREFIX,
    GRACE_S,
    READER_LOCK,
    remove_dead_asides,
)
from qtts.core.jobs.state.lock import OutDirLock


def aside(folder, name: str, age_s: float):
    path = folder / f"{ASIDE_PREFIX}{name}"
    path.mkdir()
    (path / "results.parquet").write_bytes(b"staged")
    (path / READER_LOCK).touch()
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_only_a_killed_readers_folder_goes(tmp_path):
    dead = aside(tmp_path, "dead", GRACE_S * 2)
    live = aside(tmp_path, "live", GRACE_S * 2)
    young = aside(tmp_path, "young", 0)
    other = tmp_path / "state.parquet"
    other.write_bytes(b"state")
    with OutDirLock(live / READER_LOCK):  # a reader building its views now
        assert remove_dead_asides(tmp_path) == [dead.name]
    assert not dead.exists() and live.exists() and young.exists() and other.exists()
    later = time.time() + GRACE_S * 2  # the young one's grace over; no one holds either lock
    assert sorted(remove_dead_asides(tmp_path, now=later)) == sorted([live.name, young.name])
    assert other.exists()
