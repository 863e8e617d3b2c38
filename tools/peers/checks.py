"""`peers_bench.py run --check`: what can be proven of a peer without its GPU.

Signatures: every call a run makes is bound (inspect) against the installed peer, keyword by
keyword, so a renamed or missing parameter fails here and not on the GPU machine; for
faster-qwen3-tts-batch also the transformers APIs it calls (StaticCache layers' lazy_initialization
with one tensor, create_causal_mask's input_embeds and cache_position: transformers 4's names),
which is why it runs on transformers 4.57. With --ckpt on a CPU, the faster peers' own prompt
building (`_prepare_generation`, which their generate calls run before any CUDA graph) runs on the
checkpoint, with the reference clip for Base.
"""

from __future__ import annotations

import importlib
import inspect
import json

LANG = "English"
# system -> [(module, dotted attribute, keyword names the run passes)]
SIGNATURES = {
    "official": [
        (
            "qwen_tts",
            "Qwen3TTSModel.from_pretrained",
            ["pretrained_model_name_or_path", "device_map", "dtype"],
        ),
        (
            "qwen_tts",
            "Qwen3TTSModel.create_voice_clone_prompt",
            ["ref_audio", "x_vector_only_mode"],
        ),
        (
            "qwen_tts",
            "Qwen3TTSModel.generate_voice_clone",
            ["text", "language", "voice_clone_prompt", "max_new_tokens"],
        ),
        (
            "qwen_tts",
            "Qwen3TTSModel.generate_custom_voice",
            ["text", "speaker", "language", "max_new_tokens"],
        ),
        ("qwen_tts", "Qwen3TTSModel._merge_generate_kwargs", ["max_new_tokens"]),
    ],
    "faster": [
        (
            "faster_qwen3_tts",
            "FasterQwen3TTS.from_pretrained",
            ["model_name", "device", "dtype", "attn_implementation", "max_seq_len"],
        ),
        ("faster_qwen3_tts", "FasterQwen3TTS.warmup", ["prefill_len"]),
        (
            "faster_qwen3_tts",
            "FasterQwen3TTS.generate_voice_clone",
            ["text", "language", "ref_audio", "xvec_only", "max_new_tokens"],
        ),
        (
            "faster_qwen3_tts",
            "FasterQwen3TTS.generate_custom_voice",
            ["text", "speaker", "language", "max_new_tokens"],
        ),
    ],
    "faster_batch": [
        (
            "faster_qwen3_tts_batch",
            "BatchedFasterQwen3TTS.from_pretrained",
            [
                "model_name",
                "max_batch_size",
                "device",
                "dtype",
                "attn_implementation",
                "max_seq_len",
            ],
        ),
        (
            "faster_qwen3_tts_batch",
            "BatchedFasterQwen3TTS.__init__",
            ["base", "max_batch_size", "max_seq_len"],
        ),
        ("faster_qwen3_tts_batch", "BatchedFasterQwen3TTS.warmup", ["prefill_len"]),
        (
            "faster_qwen3_tts_batch",
            "BatchedFasterQwen3TTS.generate_voice_clone_batch",
            ["requests", "max_new_tokens", "xvec_only", "non_streaming_mode"],
        ),
        # what generate_voice_clone_batch and warmup call on the faster-qwen3-tts it runs on
        (
            "faster_qwen3_tts",
            "FasterQwen3TTS._prepare_generation",
            [
                "text",
                "ref_audio",
                "ref_text",
                "language",
                "xvec_only",
                "non_streaming_mode",
                "append_silence",
            ],
        ),
        ("faster_qwen3_tts", "FasterQwen3TTS._warmup", ["prefill_len"]),
        # the transformers 4 APIs its graphs call (positional tensors given by name here)
        ("transformers.cache_utils", "StaticLayer.lazy_initialization", ["key_states"]),
        (
            "transformers.masking_utils",
            "create_causal_mask",
            ["config", "input_embeds", "attention_mask", "cache_position", "past_key_values"],
        ),
    ],
}


def bind(module: str, dotted: str, names: list[str]) -> str:
    """'ok' or why not: each keyword must be a named parameter or land in **kwargs; for
    StaticLayer.lazy_initialization, a one-tensor call must leave no required parameter out."""
    target = importlib.import_module(module)
    for part in dotted.split("."):
        target = getattr(target, part)
    sig = inspect.signature(target)
    params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
    explicit = {p.name for p in params if p.kind is not p.VAR_KEYWORD}
    catch_all = any(p.kind is p.VAR_KEYWORD for p in params)
    unknown = [n for n in names if n not in explicit and not catch_all]
    if unknown:
        return f"FAILS: {dotted}{sig} takes no {unknown}"
    required = [
        p.name
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    missing = [n for n in required if n not in names]
    if missing:
        return f"FAILS: {dotted}{sig} also requires {missing}"
    via_kwargs = [n for n in names if n not in explicit]
    return "ok" + (f" ({', '.join(via_kwargs)} through **kwargs)" if via_kwargs else "")


def signatures(system: str) -> dict[str, str]:
    out = {}
    for module, dotted, names in SIGNATURES.get(system, []):
        try:
            out[f"{module}:{dotted}"] = bind(module, dotted, names)
        except Exception as e:  # an import that fails is the finding
            out[f"{module}:{dotted}"] = f"FAILS: {type(e).__name__}: {e}"
    return out


def prepare_on_cpu(system: str, kind: str, ckpt, ref, text: str, seq_len: int) -> dict:
    """The faster peers' prompt building on a CPU: their FasterQwen3TTS wraps the official model
    loaded on the CPU, graphs unbuilt and marked warm (prompt building touches no graph)."""
    import torch
    from faster_qwen3_tts import FasterQwen3TTS
    from qwen_tts import Qwen3TTSModel

    base = Qwen3TTSModel.from_pretrained(str(ckpt), dtype=torch.float32)
    model = FasterQwen3TTS(base, None, None, device="cpu", dtype=torch.float32, max_seq_len=seq_len)
    model._warmed_up = True
    if kind == "base":
        got = model._prepare_generation(
            text=text,
            ref_audio=str(ref),
            ref_text="",
            language=LANG,
            xvec_only=True,
            non_streaming_mode=False,
            append_silence=True,
        )
    else:
        got = model._prepare_generation_custom(text=text, language=LANG, speaker="vivian")
    embeds, mask, trailing = got[3], got[4], got[5]
    return {
        "prompt_embeds": list(embeds.shape),
        "attention_mask": list(mask.shape),
        "trailing_text": list(trailing.shape),
        "finite": bool(torch.isfinite(embeds).all() and torch.isfinite(trailing).all()),
    }


def main(args) -> None:
    from peers import common, stubs

    report = {"system": args.system, "stand_ins": stubs.install(force=args.force_stubs)}
    report["signatures"] = signatures(args.system)
    report["versions"] = common.versions(
        "qwen-tts", "qwen-tts-hf", "faster-qwen3-tts", "faster-qwen3-tts-batch"
    )
    if args.ckpt and args.system in ("faster", "faster_batch") and args.ckpt.is_dir():
        rows = common.read_rows(args.rows, 1)
        seq_len = common.seq_len_bound(rows, args.frames)
        report["cpu_prompt"] = prepare_on_cpu(
            args.system, args.kind, args.ckpt, args.ref, rows[0].text, seq_len
        )
    report["ok"] = all(v.startswith("ok") for v in report["signatures"].values())
    print(json.dumps(report), flush=True)
