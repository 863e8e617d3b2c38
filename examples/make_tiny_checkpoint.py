"""Write a tiny random Qwen3-TTS checkpoint (published layout) for trying qtts without a download.

    python examples/make_tiny_checkpoint.py /tmp/tiny-cv
    qtts synth lines.txt --model /tmp/tiny-cv --speaker vivian --out-dir out

The audio is noise (random weights); the files, shapes and token ids are those of a real checkpoint.
Its EOS fires by the text (core/tiny/length_eos.py): a row ends after about one frame per text
token (plus 3), so qtts needs no --max-new-tokens, and budgets, --on-budget retry and long text
behave as with a real model. `--no-eos-by-text` gives the plain random checkpoint, whose EOS never
wins: every row runs to its frame budget (N - 1 frames for --max-new-tokens N), for runs that want
fixed lengths. `--preset small` (or dims like `--hidden 256 --layers 4`) gives a model for CPU
speed tests; `--size 0.6b --preset 0.6b` the published shapes (random weights) for side-by-side
speed runs.
"""

from __future__ import annotations

import argparse
import dataclasses

from qtts.core.tiny.checkpoint import TinyDims, make_tiny_checkpoint


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir", help="directory to write (created; existing files are replaced)")
    p.add_argument(
        "--model-type",
        choices=["custom_voice", "voice_design", "base"],
        default="custom_voice",
        help="base: voice clone, with the speaker encoder and the speech tokenizer's encoder",
    )
    p.add_argument(
        "--size",
        choices=["1.7b", "0.6b"],
        default="1.7b",
        help="the layout of: 1.7b (predictor narrower than the talker), 0.6b (equal widths)",
    )
    p.add_argument(
        "--preset",
        choices=["tiny", "small", "0.6b", "1.7b"],
        default="tiny",
        help="dims: tiny, small (CPU speed tests), or the published 0.6b / 1.7b shapes (with the "
        "same --size; about 2 / 7 GB of random weights)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="storage dtype of model.safetensors (the speech tokenizer stays float32)",
    )
    p.add_argument(
        "--greedy",
        action="store_true",
        help="generation_config.json with do_sample/subtalker_dosample false",
    )
    p.add_argument(
        "--eos-by-text",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="weights whose EOS ends a row after about one frame per text token (plus 3), greedy "
        "or sampled (the default); --no-eos-by-text: EOS never wins, every row runs to its frame "
        "budget (fixed lengths)",
    )
    for f in dataclasses.fields(TinyDims):
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            type=int,
            default=None,
            dest=f.name,
            help="override the preset's " + f.name,
        )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    names = [f.name for f in dataclasses.fields(TinyDims)]
    dims = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    try:
        out = make_tiny_checkpoint(
            args.out_dir, model_type=args.model_type, seed=args.seed,
            size={"1.7b": "1b7", "0.6b": "0b6"}[args.size],
            greedy=args.greedy, stop_by_text=args.eos_by_text, dtype=args.dtype,
            preset=args.preset, **dims,
        )  # fmt: skip
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    print(out)


if __name__ == "__main__":
    main()
