"""A signal stops a `qtts score` pass between chunks of rows: the chunk in hand is dropped, every
chunk before it is kept in scores.parquet, and the summary says `interrupted` with the exit code
a cron job reads (143 for SIGTERM); the next pass scores only what is left. A stand-in scorer
(no model) sends the signal from inside its second chunk, where the pass is interruptible."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pyarrow.parquet as pq
import soundfile as sf

from qtts.core.quality import dnsmos, score_pass
from qtts.core.quality.scorers import ScoreOptions, Scorer

CLIPS = 4


def _folder(root):
    root.mkdir()
    wave = 0.1 * np.sin(np.linspace(0, 800, 24000)).astype(np.float32)
    lines = []
    for i in range(CLIPS):
        sf.write(root / f"c{i}.wav", wave, 24000)
        lines.append(json.dumps({"file_name": f"c{i}.wav", "text": f"clip {i}"}))
    (root / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_a_signal_keeps_the_scored_chunks_and_the_next_pass_goes_on(tmp_path, monkeypatch):
    data = _folder(tmp_path / "data")
    calls, sent = [], []

    def load():
        def score(clips, rows):
            calls.append(len(clips))
            if len(calls) == 2 and not sent:  # in the second chunk: Interrupted is raised here
                sent.append(signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)
            return [(1.0, 2.0, 3.0) for _ in clips]

        return score

    fake = Scorer("dnsmos", "fake-scorer-1", dnsmos.COLUMNS, dnsmos.DONE, load)
    monkeypatch.setattr(score_pass, "choose_scorers", lambda opts: [fake])
    monkeypatch.setattr(score_pass, "CHUNK_ROWS", 1)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        first = score_pass.score_path(data, ScoreOptions(speaker_model=None))
    finally:  # a stopped pass leaves "exit at once" on a second signal: not for pytest
        for s, handler in handlers.items():
            signal.signal(s, handler)
    assert (first["status"], first["exit_code"], first["scored_now"]) == ("interrupted", 143, 1)
    assert first["scored"] == 1  # what the pass got through, not what it set out to do
    scored = pq.read_table(data / "scores.parquet").to_pylist()
    assert sum(r["dnsmos_ovrl"] is not None for r in scored) == 1  # the first chunk, kept
    again = score_pass.score_path(data, ScoreOptions(speaker_model=None))
    assert (again["status"], again["exit_code"]) == ("done", None)
    assert (again["skipped"], again["scored"], again["scored_now"]) == (1, CLIPS - 1, CLIPS - 1)
    assert all(r["dnsmos_ovrl"] == 3.0 for r in pq.read_table(data / "scores.parquet").to_pylist())
