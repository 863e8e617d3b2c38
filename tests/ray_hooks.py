"""Model factories for the Ray backend tests (QTTS_FAKE_SYNTH=ray_hooks): the real tiny model,
wrapped so rows marked in their text misbehave inside a Ray actor.

- "FAIL ...": the row fails in the model, alone, with a reason;
- "KILL ...": the actor process exits the first time it gets this row (a marker file in
  $QTTS_TEST_MARKERS remembers), so Ray must restart the actor and retry its rows;
- "SLOW ...": the row takes 0.5 s more (time to kill a driver mid-job);
- "PID ...": the actor leaves a marker naming its process and the row (who did which row).
Actors inherit their environment from the Ray cluster, so the tests set QTTS_TEST_MARKERS (and
PYTHONPATH, to import this module) before the cluster starts."""

from __future__ import annotations

import os
import time
from pathlib import Path

from qtts.core.synthesis.requests import RowFailure
from qtts.core.synthesis.session import load_synthesizer as real_load
from qtts.core.synthesis.session import open_text_model  # noqa: F401 (the factory pair)


class Hooked:
    def __init__(self, synth):
        self.synth = synth

    def synthesize(self, requests, options):
        for r in (r for r in requests if r.text.startswith("KILL")):
            marker = Path(os.environ["QTTS_TEST_MARKERS"]) / f"killed-{r.id}"
            if not marker.exists():
                marker.touch()
                os._exit(17)  # the actor process dies mid-batch
        failing = [r for r in requests if r.text.startswith("FAIL")]
        for r in failing:
            yield RowFailure(r.id, "simulated failure in the model")
        for r in (r for r in requests if r.text.startswith("PID")):
            (Path(os.environ["QTTS_TEST_MARKERS"]) / f"pid-{os.getpid()}-{r.id}").touch()
        slow = {r.id for r in requests if r.text.startswith("SLOW")}
        for item in self.synth.synthesize([r for r in requests if r not in failing], options):
            time.sleep(0.5 if item.id in slow else 0.0)
            yield item


def load_synthesizer(text_model, placement):
    return Hooked(real_load(text_model, placement))
