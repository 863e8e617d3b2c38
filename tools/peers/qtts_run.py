"""qtts: `qtts batch` on the rows file, run in this process as its console script runs it.

The command line: `qtts batch ROWS --model DIR --device D --dtype bfloat16 --max-new-tokens F+1
--language english --split none --out-dir OUT --overwrite -q`, plus `--ref-audio CLIP
--x-vector-only` for a Base checkpoint (a CustomVoice row's speaker is its manifest column) and
`--batch-size B` when one is given (default: the memory plan's). Sampling: the checkpoint's
generation_config.json. A row that never stops gets max_new_tokens - 1 frames.

Timing: the model's load is the span of `load_synthesizer`, seen through the command's one test
hook (QTTS_FAKE_SYNTH names this module, whose factories wrap the real ones); the timed span is
from its return to the command's end: synthesis with its CUDA graph captures, the WAVs, the
records and results.parquet. qtts gets no untimed warmup call (its command loads and runs once).
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

LOADED: dict[str, float] = {}  # "start", "end": perf_counter around load_synthesizer


def open_text_model(model: str):
    from qtts.core.synthesis import session

    return session.open_text_model(model)


def load_synthesizer(text_model, placement):
    from qtts.core.synthesis import session

    LOADED["start"] = time.perf_counter()
    synth = session.load_synthesizer(text_model, placement)
    LOADED["end"] = time.perf_counter()
    return synth


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


def run(argv: list[str]) -> tuple[dict, float, float]:
    """(the command's summary JSON, load seconds, seconds from load's end to the command's end)."""
    from qtts.cli.app import main

    os.environ["QTTS_FAKE_SYNTH"] = __name__
    stdout = io.StringIO()
    sys.argv = ["qtts", *argv]
    with contextlib.redirect_stdout(stdout):
        try:
            main()
        except SystemExit as e:
            code = e.code
    end = time.perf_counter()
    lines = [line for line in stdout.getvalue().splitlines() if line.startswith("{")]
    summary = json.loads(lines[-1]) if lines else {}
    if code not in (0, None) or "end" not in LOADED:
        raise RuntimeError(f"qtts batch exited {code}: {stdout.getvalue()[-2000:]}")
    return summary, LOADED["end"] - LOADED["start"], end - LOADED["end"]
