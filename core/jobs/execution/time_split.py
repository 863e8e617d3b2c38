"""Where a run's wall time went, from `run_job`'s call to its summary, in the order it went: the
job summary's `time_split`. Its parts add up to `command_s`, so a slow start shows as one number
beside the decoding it delayed.

Knows the run's edges as `time.monotonic()` readings and the synthesizer clock's one-time work;
nothing of engines or files.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RunEdges:
    """time.monotonic() at each edge of a run; None where the run never got there."""

    called: float  # run_job called: the input read and validated next, then the lock taken
    run: float | None = None  # the locked run began
    load: float | None = None  # the model's load began (nothing to synthesize: never)
    synthesis: float | None = None  # the loaded backend took the first chunk
    last_step: float | None = None  # the last decode step was launched (the synthesizer's clock)
    written: float | None = None  # the last outcome came back: its row written and recorded


def time_split(edges: RunEdges, end: float, one_time_s: float = 0.0) -> dict[str, float | None]:
    """The parts of the run's wall time, seconds (3 decimals), adding up to command_s:
    - input_s: reading and validating every row, the lock;
    - scan_s: a killed run settled, the resume scan, rows repacked (or all that preceded the
      end, when nothing was synthesized);
    - load_s: the model's load;
    - one_time_s: work done once before decoding could run (decode-step graph captures and the
      kernel compiles of their warm-up; vocoder graphs captured ahead), from the clock;
    - decoding_s: the rest of the span up to the last decode step;
    - drain_s: after the last step, until the last row was written (the vocoder's last windows,
      the writers' tail); None where no decode step was counted (a Ray run's steps are its
      actors');
    - finish_s: the journal folded, the views rebuilt, the summary counted."""
    run = edges.run if edges.run is not None else end
    load = edges.load if edges.load is not None else run
    synthesis = edges.synthesis if edges.synthesis is not None else load
    written = edges.written if edges.written is not None else synthesis
    spans: dict[str, float | None] = {
        "input_s": run - edges.called,
        "scan_s": (edges.load if edges.load is not None else end) - run,
        "load_s": synthesis - load,
    }
    last = edges.last_step
    if edges.synthesis is None:
        spans.update(one_time_s=0.0, decoding_s=0.0, drain_s=None)
    elif last is None:
        spans.update(one_time_s=one_time_s, decoding_s=written - synthesis - one_time_s)
        spans["drain_s"] = None
    else:
        last = min(max(last, synthesis), written)
        spans.update(one_time_s=one_time_s, decoding_s=last - synthesis - one_time_s)
        spans["drain_s"] = written - last
    spans["finish_s"] = end - written if edges.synthesis is not None else 0.0
    spans["command_s"] = end - edges.called
    return {k: None if v is None else round(v, 3) for k, v in spans.items()}
