"""Progress moves during a long split row, through the console script (the fake model, a delay
per segment): while the only row is still being made, the heartbeat counts its segments and
their audio and gives an ETA, instead of `0/1 rows ... ETA ?` until the row ends."""

from __future__ import annotations

import re
import subprocess

from fakes import fake_env, qtts_cmd

PARAGRAPH = " ".join(f"Sentence number {i} of a long paragraph." for i in range(10))


def test_the_heartbeat_counts_segments_of_an_unfinished_row(tmp_path):
    lines = tmp_path / "long.txt"
    lines.write_text(PARAGRAPH + "\n")
    proc = subprocess.run(
        qtts_cmd("synth", lines, "-o", tmp_path / "out", "--speaker", "ryan", "--split",
                 "sentence", "--log-interval", 1),
        capture_output=True, text=True, env=fake_env(QTTS_FAKE_DELAY="0.4"), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    during = [x for x in proc.stderr.splitlines() if "progress: 0/1 rows + " in x]
    assert during, proc.stderr  # ~4 s of segments: at least one heartbeat before the row ends
    segments, audio = re.search(r"\+ (\d+) segments?, ([\d.]+) of about", during[-1]).groups()
    assert int(segments) >= 1 and float(audio) > 0
    assert not during[-1].endswith("ETA ?")
