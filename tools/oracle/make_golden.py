"""Regenerate the golden fixtures in tests/fixtures/golden/ with the official qwen-tts code.

Run in the oracle venv (see tools/oracle/README.md):
    /work/oracle/bin/python tools/oracle/make_golden.py [--only STAGE ...]
    STAGE: speech_tokenizer | cv17 | cv06 | vd | codec_long | base (default: all, in that order)

Owns: the order of work (speech tokenizer -> each checkpoint: draw, trajectories, aim EOS,
rewrite, run cases -> codec_long) and writing cases.json / cases/<name>.npz.

Must not know: qtts (never imported; the project tests read only the files written here).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oracle_env import GOLDEN, install_torchaudio_stub, write_json  # noqa: E402

install_torchaudio_stub()

import cases as C  # noqa: E402
import checkpoints as K  # noqa: E402
import eos_aim as E  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

MIN_MARGIN = 0.05  # logit margin the aimed EOS row must keep after dtype rounding


def load_official(ckpt_dir: Path):
    from qwen_tts import Qwen3TTSModel

    return Qwen3TTSModel.from_pretrained(str(ckpt_dir), dtype=torch.float32)


def trajectories(tts, name: str) -> dict[str, E.Trajectory]:
    """Each distinct row alone, EOS row at zero: the no-stop greedy trajectory per row."""
    rec = E.StepRecorder(tts.model.talker.codec_head)
    out = {}
    try:
        for row_name, row in C.ROWS[name].items():
            rec.clear()
            got = C.run_rows(tts, name, [row], C.MAX_NEW_TOKENS[name])
            traj = E.replay(rec.hidden, rec.logits)
            codes0 = got["codes"][0][:, 0].tolist()
            if traj.tokens[: len(codes0)] != codes0:
                raise ValueError(f"{name}/{row_name}: greedy replay differs from official c0")
            out[row_name] = traj
    finally:
        rec.remove()
    return out


def build_checkpoint(name: str) -> None:
    """Draw, aim EOS, write the checkpoint dir; then run and store its cases."""
    spec = K.SPECS[name]
    model, cfg = K.build_model(spec)
    ckpt_dir = GOLDEN / name
    K.write_checkpoint(spec, model, cfg, ckpt_dir)
    trajs = trajectories(load_official(ckpt_dir), name)
    plan = {r: C.STOP_PLAN[name].get(r) for r in C.ROWS[name]}
    w, margin = E.solve_eos_row(trajs, plan)
    K.set_eos_row(model, w, spec.storage_dtype)
    stored = model.talker.codec_head.weight[K.CODEC_EOS].detach().double().numpy()
    kept = E.margins(trajs, plan, stored)
    print(f"[{name}] EOS LP margin {margin:.4f}, after {spec.storage_dtype} rounding {kept:.4f}")
    if kept < MIN_MARGIN:
        raise ValueError(f"{name}: EOS margin {kept:.4f} too small; change STOP_PLAN or seed")
    K.write_checkpoint(spec, model, cfg, ckpt_dir)
    run_cases(name, load_official(ckpt_dir), plan)


def _expected_frames(plan: dict, row: str, n: int) -> int:
    stop = plan.get(row)
    return n - 1 if stop is None else stop


def run_cases(name: str, tts, plan: dict) -> None:
    """Run every case of checkpoint `name`, check stops, write npz + cases.json entries."""
    (GOLDEN / "cases").mkdir(parents=True, exist_ok=True)
    entries = _load_cases_json()
    entries = [e for e in entries if e["checkpoint"] != name]
    for case in [c for c in C.CASES if c.checkpoint == name]:
        n = C.MAX_NEW_TOKENS[name]
        rows = [C.ROWS[name][r] for r in case.rows]
        got = C.run_rows(tts, name, rows, n)
        frames = [int(c.shape[0]) for c in got["codes"]]
        want = [_expected_frames(plan, r, n) for r in case.rows]
        if frames != want:
            raise ValueError(f"{case.name}: frames {frames}, planned {want}")
        arrays = {}
        for i, (codes, audio) in enumerate(zip(got["codes"], got["audio"], strict=True)):
            if audio.shape[0] != codes.shape[0] * 1920:
                raise ValueError(f"{case.name}: row {i} audio {audio.shape} vs {codes.shape}")
            arrays[f"codes_{i}"] = codes.astype(np.int64)
            arrays[f"audio_{i}"] = audio.astype(np.float32)
        np.savez_compressed(GOLDEN / "cases" / f"{case.name}.npz", **arrays)
        entries.append(_case_entry(case, rows, got, frames, n))
        print(f"[{name}] {case.name}: frames {frames}")
    order = {c.name: i for i, c in enumerate(C.CASES)}
    entries.sort(key=lambda e: order.get(e["name"], len(order)))
    write_json(GOLDEN / "cases.json", entries)


def _case_entry(case, rows, got, frames, n) -> dict:
    return {
        "name": case.name,
        "checkpoint": case.checkpoint,
        "call": C.CALL[case.checkpoint],
        "max_new_tokens": n,
        "rows": [
            {"text": r.text, "speaker": r.speaker, "language": r.language, "instruct": r.instruct}
            for r in rows
        ],
        "row_keys": list(case.rows),
        "input_ids": got["input_ids"],
        "instruct_ids": got["instruct_ids"],
        "num_frames": frames,
    }


def _load_cases_json() -> list:
    path = GOLDEN / "cases.json"
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=None, help="stage(s) to run")
    args = parser.parse_args(argv)
    stages = args.only or ["speech_tokenizer", "cv17", "cv06", "vd", "codec_long", "base"]
    torch.set_num_threads(2)
    for stage in stages:
        if stage == "speech_tokenizer":
            from speech_tokenizer import write_speech_tokenizer

            write_speech_tokenizer(GOLDEN / "speech_tokenizer")
        elif stage == "codec_long":
            from codec_long import write_codec_long

            write_codec_long(GOLDEN)
        elif stage == "base":  # voice clone (clone_golden.py); needs speech_tokenizer first
            from clone_golden import build_base

            build_base()
        elif stage in K.SPECS:
            build_checkpoint(stage)
        else:
            raise ValueError(f"unknown stage {stage!r}")


if __name__ == "__main__":
    main()
