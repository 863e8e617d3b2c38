"""qtts: `qtts batch` on the rows file, run in this process as its console script runs it, after
a short warm-up job in the same process on the same loaded model.

The command line: `qtts batch ROWS --model DIR --device D --dtype bfloat16 --max-new-tokens F+1
--language english --split none --out-dir OUT --overwrite -q`, plus `--ref-audio CLIP
--x-vector-only` for a Base checkpoint (a CustomVoice row's speaker is its manifest column) and
`--batch-size B` when one is given (default: the memory plan's). Sampling: the checkpoint's
generation_config.json. A row that never stops gets max_new_tokens - 1 frames.

Warm-up (untimed, as the peers' warmup is): the same command on the first WARMUP rows at WARMUP
frames (16 x 16 at most; 16 rows give the plan the speech decoder batch of the real job) and a
copy of the clip at another path, so the real job builds its own voice clone prompt, as the
peers' timed spans do. The speech decoder's window graphs are captured as each shape is first
met, so the warm-up captures those of its own windows and the real job the rest.

The model is loaded once: this module is the command's one test hook (QTTS_FAKE_SYNTH), whose
`load_synthesizer` times the real load and hands the loaded synthesizer to the second command.
What the warm-up leaves ready: the speech decoder's CUDA graphs it met (kept by the
synthesizer), the Triton kernels, cuBLAS and the allocator; what the real job still does itself:
the decode step's CUDA graphs, captured per engine pass at that pass's slots and KV length (as
every job's pass does), and its own window shapes' graphs.

Timing: load is the span of the first `load_synthesizer`; warmup from its return to the warm-up
command's end; wall from the second command's `load_synthesizer` returning (the cached model) to
its end: the reference prompt, synthesis, the WAVs, the records and results.parquet.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

from peers.common import max_new_tokens

WARMUP = (16, 16)  # the warm-up job's rows and frames, at most
LOADED: dict[str, float] = {}  # "start", "end": the load; "ready": the last load_synthesizer return
_SYNTHS: dict[tuple, object] = {}  # (model dir, placement) -> the loaded synthesizer


def warmup_shape(rows: int, frames: int) -> tuple[int, int]:
    """(rows, frames) of the warm-up job before `rows` rows of `frames` frames."""
    return min(rows, WARMUP[0]), min(frames, WARMUP[1])


def open_text_model(model: str):
    from qtts.core.synthesis import session

    return session.open_text_model(model)


def load_synthesizer(text_model, placement):
    """The real load the first time; the same synthesizer again for the same model and
    placement (the warm-up job's, with the graphs it captured)."""
    from qtts.core.synthesis import session

    key = (str(text_model.model_dir), placement)
    if key not in _SYNTHS:
        LOADED["start"] = time.perf_counter()
        _SYNTHS[key] = session.load_synthesizer(text_model, placement)
        LOADED["end"] = time.perf_counter()
    LOADED["ready"] = time.perf_counter()
    return _SYNTHS[key]


def command(
    rows: Path,
    ckpt: Path,
    kind: str,
    ref: Path | None,
    frames: int,
    out: Path,
    device: str,
    batch: str = "auto",
) -> list[str]:
    argv = [
        "batch",
        str(rows),
        "--model",
        str(ckpt),
        "--device",
        device,
        "--dtype",
        "bfloat16",
        "--max-new-tokens",
        str(max_new_tokens("qtts", frames)),
        "--language",
        "english",
        "--split",
        "none",
        "--out-dir",
        str(out),
        "--overwrite",
        "-q",
    ]
    if kind == "base":
        argv += ["--ref-audio", str(ref), "--x-vector-only"]
    if batch != "auto":
        argv += ["--batch-size", str(batch)]
    return argv


def run(argv: list[str]) -> tuple[dict, float]:
    """(the command's summary JSON, seconds from load_synthesizer's return to the command's
    end)."""
    from qtts.cli.app import main

    os.environ["QTTS_FAKE_SYNTH"] = __name__
    LOADED.pop("ready", None)
    stdout = io.StringIO()
    sys.argv = ["qtts", *argv]
    code = 0
    with contextlib.redirect_stdout(stdout):
        try:
            main()
        except SystemExit as e:
            code = e.code
    end = time.perf_counter()
    lines = [line for line in stdout.getvalue().splitlines() if line.startswith("{")]
    summary = json.loads(lines[-1]) if lines else {}
    if code not in (0, None) or "ready" not in LOADED:
        raise RuntimeError(f"qtts batch exited {code}: {stdout.getvalue()[-2000:]}")
    return summary, end - LOADED["ready"]


def warm_then_run(warm_argv: list[str], argv: list[str]) -> dict:
    """The warm-up command, then the real one on the same loaded model: their summaries and
    load_s, warmup_s, wall_s."""
    warm, warmup_s = run(warm_argv)
    summary, wall_s = run(argv)
    return {
        "summary": summary,
        "warmup_summary": warm,
        "load_s": LOADED["end"] - LOADED["start"],
        "warmup_s": warmup_s,
        "wall_s": wall_s,
    }
