"""The lines `qtts bench` prints for one measured row (core/bench/throughput.py BenchResult):
the whole run beside the steady state, the model-free measures' rate, the decode step plain and
split into parts. Text only: no torch, no timing.
"""

from __future__ import annotations

# On a CPU both step figures time the same work; sets of steps this far apart were disturbed.
LOAD_GAP = 1.5


def steady_line(r) -> str:
    """The whole run's audio-s/s beside the steady state's (groups after the first, first fill
    left out), or why there is no steady state."""
    whole = f"whole run {r.audio_s_per_s:.2f} audio-s/s over {r.requests} requests"
    if r.steady_audio_s_per_s is None:
        return f"{whole}; steady state: one group only (give more --passes)"
    return (
        f"{whole}; steady state {r.steady_audio_s_per_s:.2f} audio-s/s over "
        f"{r.groups - 1} groups after the first"
    )


def rate(s_per_audio_s: float) -> str:
    """Seconds per audio-second, and its inverse: audio-seconds measured per second."""
    per_s = f"{1 / s_per_audio_s:,.0f} audio-s/s" if s_per_audio_s > 0 else "unmeasured"
    return f"{s_per_audio_s * 1e6:.1f} µs per audio-s ({per_s})"


def step_line(step_ms: dict, synced: bool) -> str:
    """The plain step (and the graph replay), then the instrumented step: a separate set of
    steps timed part by part, whose parts add up to it (core/bench/step_parts.py). synced: the
    device is synced at each part (a GPU), so the instrumented step carries that overhead; a CPU
    has nothing to sync, so both figures time the same work and a wide gap between them is load."""
    parts, n = step_ms["parts"], step_ms.get("repeats", 5)
    plain = f"{step_ms['step']:.2f} ms (plain decode step, unsynced, mean of {n})"
    graph = ""
    if "graph_step" in step_ms:
        graph = f"; graph replay {step_ms['graph_step']:.2f} ms (mean of {n})"
    split = " + ".join(f"{k} {parts[k]:.2f}" for k in parts if k != "instrumented_step")
    instrumented = parts["instrumented_step"]
    if synced:
        how = (
            f"{n} further steps, synced at each part: sync overhead included; "
            "the parts add up to this, not to the step above"
        )
    else:
        how = f"{n} further steps, timed at each part; no sync on a CPU: the same work as above"
    lines = [
        f"      step: {plain}{graph}",
        f"      instrumented step: {instrumented:.2f} ms = {split} ({how})",
    ]
    gap = max(instrumented, step_ms["step"]) / max(min(instrumented, step_ms["step"]), 1e-9)
    if not synced and gap > LOAD_GAP:
        lines.append(
            f"      the two sets of steps differ {gap:.1f}x for the same work: the machine was "
            "busy (other processes on its cores); time on an idle machine"
        )
    return "\n".join(lines)


def time_line(split: dict) -> str:
    """Where the time went around the timed run (BenchResult.time_split): the one-time work
    before it beside the run's decoding and drain."""
    graphs = split.get("vocoder_graphs", 0)
    return (
        f"time: start {split.get('start_s', 0.0):.2f} s (imports, weights), engine build "
        f"{split['build_s']:.2f} s (decode graphs, kernel compiles); in the run: "
        f"decoding {split['decoding_s']:.2f} s, then {split['drain_s']:.2f} s of drain; "
        f"{graphs} vocoder graphs captured as first met, {split['vocoder_graphs_s']:.2f} s "
        "on its thread"
    )
