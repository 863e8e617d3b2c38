"""The official code (qwen-tts-hf, the transformers-5 build of qwen-tts), batched with a list of
texts, as its README calls it.

Load: `Qwen3TTSModel.from_pretrained(dir, device_map=device, dtype=bfloat16)` (the speech
tokenizer and speaker encoder load in the same dtype, as the README runs them). Warmup (untimed):
one short call, so CUDA's lazy initialisation is not billed to the first batch. Timed: for a Base
checkpoint the x-vector prompt is built once from the reference clip (`create_voice_clone_prompt`
with `x_vector_only_mode=True`; the clip read with the standard library, as (waveform, rate)), then
`generate_voice_clone(text=[...], language=[...], voice_clone_prompt=[item])` per batch (one item
serves every text; voice clone's own default `non_streaming_mode=False`); for CustomVoice
`generate_custom_voice(text=[...], speaker=[...], language=[...])`. Sampling: the checkpoint's
generation_config.json (the wrapper's defaults). `max_new_tokens` = frames + 1: a row that never
stops gets max_new_tokens - 1 frames. Each batch's WAVs are written before the next batch starts.
"""

from __future__ import annotations

from pathlib import Path

from peers.common import LANGUAGE, Row, max_new_tokens, read_wav, write_wav

PACKAGE = "qwen-tts-hf"


def calls(kind: str, batch: int, frames: int) -> list[str]:
    """The calls a run makes, spelled out (--dry-run prints them)."""
    tokens = max_new_tokens("official", frames)
    load = "Qwen3TTSModel.from_pretrained(ckpt, device_map=device, dtype=torch.bfloat16)"
    if kind == "base":
        return [
            load,
            "create_voice_clone_prompt(ref_audio=(wav, 24000), x_vector_only_mode=True)",
            f"generate_voice_clone(text=[{batch} texts], language=[...], "
            f"voice_clone_prompt=[item], max_new_tokens={tokens})",
        ]
    return [
        load,
        f"generate_custom_voice(text=[{batch} texts], speaker=[...], language=[...], "
        f"max_new_tokens={tokens})",
    ]


class Runner:
    def __init__(self, ckpt: Path, kind: str, device: str, dtype):
        from qwen_tts import Qwen3TTSModel

        self.kind = kind
        self.model = Qwen3TTSModel.from_pretrained(str(ckpt), device_map=device, dtype=dtype)
        self.prompt = None

    def warmup(self, rows: list[Row], ref: Path | None) -> None:
        self._generate(rows[:1], ref, tokens=3, prompt=self._prompt(ref))

    def start(self, ref: Path | None) -> None:
        """Timed: what a run does once before its batches (the voice clone prompt)."""
        self.prompt = self._prompt(ref)

    def run_batch(self, rows: list[Row], ref: Path | None, frames: int, out: Path) -> None:
        wavs, rate = self._generate(rows, ref, max_new_tokens("official", frames), self.prompt)
        for row, wav in zip(rows, wavs, strict=True):
            write_wav(out / f"{row.id}.wav", wav, rate)

    def _prompt(self, ref: Path | None):
        if self.kind != "base":
            return None
        return self.model.create_voice_clone_prompt(
            ref_audio=read_wav(ref), x_vector_only_mode=True
        )

    def _generate(self, rows: list[Row], ref, tokens: int, prompt):
        texts, languages = [r.text for r in rows], [LANGUAGE] * len(rows)
        if self.kind == "base":
            return self.model.generate_voice_clone(
                text=texts, language=languages, voice_clone_prompt=prompt, max_new_tokens=tokens
            )
        speakers = [r.speaker for r in rows]
        return self.model.generate_custom_voice(
            text=texts, speaker=speakers, language=languages, max_new_tokens=tokens
        )
