"""faster-qwen3-tts (one request at a time, CUDA graphs) and faster-qwen3-tts-batch (its batched
graphs, `generate_voice_clone_batch`), called as their READMEs do.

faster-qwen3-tts 0.5.4 (transformers 5): `FasterQwen3TTS.from_pretrained(dir, device="cuda",
dtype=bfloat16, attn_implementation="sdpa", max_seq_len=L)`, then `warmup(prefill_len)` (captures
the predictor and talker graphs; untimed, as the README's setup step), then per row
`generate_voice_clone(text, language, ref_audio=path, xvec_only=True, max_new_tokens=F)` (the
x-vector prompt is computed on the first call and cached by the clip's path) or
`generate_custom_voice(text, speaker, language, max_new_tokens=F)`.

faster-qwen3-tts-batch 0.2.0 (transformers 4.57, with faster-qwen3-tts 0.3.2 and qwen-tts 0.1.1:
it calls transformers 4's StaticCache and mask APIs, which 5.x changed):
`BatchedFasterQwen3TTS.from_pretrained(dir, max_batch_size=B, device, dtype, attn_implementation,
max_seq_len=L)`, `warmup(prefill_len)` (the single and the batched graphs), then per B rows
`generate_voice_clone_batch([{text, language, ref_audio, ref_text: ""}], max_new_tokens=F,
xvec_only=True, non_streaming_mode=False)`; other batch sizes reuse the loaded model through
`BatchedFasterQwen3TTS(base, max_batch_size=B2, max_seq_len=L)` (its constructor's documented use).

Both return F frames for max_new_tokens=F (their loops append a frame per step and stop at the
budget; min_new_tokens only delays EOS). Sampling: their defaults, which equal the checkpoint's
generation_config.json (temperature 0.9, top-k 50, top-p 1, repetition penalty 1.05; the code
predictor's graphs are built with do_sample, top-k 50, temperature 0.9).
`non_streaming_mode=False` is the official voice clone default, used by every system here.
"""

from __future__ import annotations

from pathlib import Path

from peers.common import LANGUAGE, Row, max_new_tokens, seq_len_bound, write_wav

PREFILL_WARMUP = 32  # the prompt length the graphs are warmed at (their replay is position-free)


def calls(system: str, kind: str, batch: int, frames: int, seq_len: int) -> list[str]:
    tokens = max_new_tokens(system, frames)
    common = "device='cuda', dtype=torch.bfloat16, attn_implementation='sdpa'"
    if system == "faster":
        gen = (
            f"generate_voice_clone(text, '{LANGUAGE}', ref_audio=path, xvec_only=True, "
            f"max_new_tokens={tokens})"
            if kind == "base"
            else f"generate_custom_voice(text, speaker, '{LANGUAGE}', max_new_tokens={tokens})"
        )
        return [
            f"FasterQwen3TTS.from_pretrained(ckpt, {common}, max_seq_len={seq_len})",
            f"warmup(prefill_len={PREFILL_WARMUP})",
            f"per row: {gen}",
        ]
    return [
        f"BatchedFasterQwen3TTS.from_pretrained(ckpt, max_batch_size={batch}, {common}, "
        f"max_seq_len={seq_len})",
        f"warmup(prefill_len={PREFILL_WARMUP})",
        f"per {batch} rows: generate_voice_clone_batch([{{text, language: '{LANGUAGE}', "
        f"ref_audio: path, ref_text: ''}}], max_new_tokens={tokens}, xvec_only=True, "
        "non_streaming_mode=False)",
    ]


class SingleRunner:
    def __init__(self, ckpt: Path, kind: str, device: str, dtype, rows: list[Row], frames: int):
        from faster_qwen3_tts import FasterQwen3TTS

        self.kind = kind
        self.model = FasterQwen3TTS.from_pretrained(
            str(ckpt),
            device=device,
            dtype=dtype,
            attn_implementation="sdpa",
            max_seq_len=seq_len_bound(rows, frames),
        )

    def warmup(self, rows: list[Row], ref: Path | None) -> None:
        self.model.warmup(prefill_len=PREFILL_WARMUP)

    def start(self, ref: Path | None) -> None:
        pass  # the first call computes and caches the x-vector prompt (timed)

    def run_batch(self, rows: list[Row], ref: Path | None, frames: int, out: Path) -> None:
        tokens = max_new_tokens("faster", frames)
        for row in rows:
            if self.kind == "base":
                wavs, rate = self.model.generate_voice_clone(
                    text=row.text,
                    language=LANGUAGE,
                    ref_audio=str(ref),
                    xvec_only=True,
                    max_new_tokens=tokens,
                )
            else:
                wavs, rate = self.model.generate_custom_voice(
                    text=row.text, speaker=row.speaker, language=LANGUAGE, max_new_tokens=tokens
                )
            write_wav(out / f"{row.id}.wav", wavs[0], rate)


class BatchRunner:
    def __init__(self, ckpt: Path, kind: str, device: str, dtype, rows: list[Row], frames: int):
        from faster_qwen3_tts_batch import BatchedFasterQwen3TTS

        if kind != "base":
            raise ValueError("faster-qwen3-tts-batch batches voice clone (Base checkpoints) only")
        self.seq_len = seq_len_bound(rows, frames)
        self.device, self.dtype, self.ckpt = device, dtype, ckpt
        self.cls = BatchedFasterQwen3TTS
        self.model = None

    def use_batch(self, batch: int) -> None:
        """Load at the first batch size; build graphs of another size on the loaded weights."""
        if self.model is None:
            self.model = self.cls.from_pretrained(
                str(self.ckpt),
                max_batch_size=batch,
                device=self.device,
                dtype=self.dtype,
                attn_implementation="sdpa",
                max_seq_len=self.seq_len,
            )
        elif self.model.max_batch_size != batch:
            self.model = self.cls(self.model.base, max_batch_size=batch, max_seq_len=self.seq_len)

    def warmup(self, rows: list[Row], ref: Path | None) -> None:
        self.model.warmup(prefill_len=PREFILL_WARMUP)

    def start(self, ref: Path | None) -> None:
        pass  # the first batch computes and caches the x-vector prompt (timed)

    def run_batch(self, rows: list[Row], ref: Path | None, frames: int, out: Path) -> None:
        requests = [
            {"text": r.text, "language": LANGUAGE, "ref_audio": str(ref), "ref_text": ""}
            for r in rows
        ]
        outputs = self.model.generate_voice_clone_batch(
            requests,
            max_new_tokens=max_new_tokens("faster_batch", frames),
            xvec_only=True,
            non_streaming_mode=False,
        )
        for row, (wavs, rate) in zip(rows, outputs, strict=True):
            write_wav(out / f"{row.id}.wav", wavs[0], rate)
