"""The ASR round trip: a Whisper-class checkpoint (a directory or a Hugging Face repo id, through
transformers) transcribes each clip; `asr_text`, and its `cer` and `wer` against the row's text
(qtts.core.quality.text_metrics).

Greedy decoding, batched (`--batch-size` 30 s windows per call), on the GPU when there is one
(float16 there, float32 on a CPU). A clip longer than Whisper's 30 s window is transcribed as
consecutive 30 s windows whose texts are joined: a word cut at a boundary may count as an error.
A row that names its language (english, chinese, ...) is transcribed in it when the model knows
it; otherwise the model detects it. Knows the model and samples; no files, no tables.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from qtts.core.quality import checkpoints
from qtts.core.quality.audio import SAMPLE_RATE
from qtts.core.quality.text_metrics import NORMALIZATION, Normalizer, error_rates, scoring_language

COLUMNS = ("asr_text", "cer", "wer")
DONE = "asr_text"  # a row has an ASR score when this is set
WINDOW_S = 30  # Whisper's input window
MIN_TAIL_S = 0.2  # a clip's last window shorter than this is left out (it holds no word)
DECODING = f"greedy/{WINDOW_S}s-windows/row-language"


def model_dir(model: str) -> Path:
    """--asr-model as a local directory (qtts.core.quality.checkpoints.model_dir)."""
    return checkpoints.model_dir(model, "--asr-model")


def identity(directory: Path) -> str:
    """What makes two ASR scores comparable: the checkpoint's files, the decoding, the
    normalization."""
    return f"asr:{checkpoints.files_identity(directory)}:{DECODING}:{NORMALIZATION}"


class Asr:
    def __init__(self, directory: Path, device: str, batch_size: int) -> None:
        import torch
        import transformers
        from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor

        from qtts.core.model.hub import ModelLoadError, one_line

        transformers.logging.set_verbosity_error()  # generate's advice is not for our users
        transformers.logging.disable_progress_bar()  # one bar on stderr: the pass's
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        self.device = torch.device(
            device if device.startswith("cuda") else "cuda" if cuda else "cpu"
        )
        self.dtype = torch.float16 if cuda else torch.float32
        try:
            self.processor = AutoProcessor.from_pretrained(directory)
            self.model = AutoModelForSpeechSeq2Seq.from_pretrained(directory, dtype=self.dtype)
        except Exception as exc:  # noqa: BLE001 -- a bad checkpoint is one line, exit 1
            raise ModelLoadError(f"--asr-model {directory}: {one_line(exc)}") from None
        if self.model.config.model_type != "whisper":
            raise ModelLoadError(
                f"--asr-model {directory} is a {self.model.config.model_type} "
                "checkpoint; qtts score takes Whisper-class models"
            )
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        tokenizer = self.processor.tokenizer
        self.normalize = Normalizer(getattr(tokenizer, "english_spelling_normalizer", None))

    def score(
        self, clips: list[np.ndarray], texts: list[str], languages: list[str | None]
    ) -> list[tuple[str, float | None, float | None]]:
        """(asr_text, cer, wer) of each clip against its row's text."""
        heard = self.transcribe(clips, languages)
        out = []
        for text, hyp, language in zip(texts, heard, languages, strict=True):
            rates = error_rates(text, hyp, scoring_language(language, text), self.normalize)
            out.append((hyp, rates.cer, rates.wer))
        return out

    def transcribe(self, clips: list[np.ndarray], languages: list[str | None]) -> list[str]:
        """Each clip's text: its windows transcribed in batches of one language each."""
        window = WINDOW_S * SAMPLE_RATE
        pieces: list[tuple[int, np.ndarray]] = []
        for k, audio in enumerate(clips):
            for start in range(0, len(audio), window):
                piece = audio[start : start + window]
                if start == 0 or len(piece) >= MIN_TAIL_S * SAMPLE_RATE:
                    pieces.append((k, piece))
        groups: dict[str | None, list[int]] = defaultdict(list)
        for i, (k, _) in enumerate(pieces):
            groups[self._language(languages[k])].append(i)
        texts = [""] * len(pieces)
        for language, members in groups.items():
            for start in range(0, len(members), self.batch_size):
                batch = members[start : start + self.batch_size]
                heard = self._generate([pieces[i][1] for i in batch], language)
                for i, text in zip(batch, heard, strict=True):
                    texts[i] = text
        joined: list[list[str]] = [[] for _ in clips]
        for (k, _), text in zip(pieces, texts, strict=True):
            joined[k].append(text)
        return [" ".join(t for t in parts if t) for parts in joined]

    def _generate(self, audio: list[np.ndarray], language: str | None) -> list[str]:
        import torch

        features = self.processor.feature_extractor(
            audio, sampling_rate=SAMPLE_RATE, return_tensors="pt"
        ).input_features
        kwargs = {"language": language, "task": "transcribe"} if language else {}
        with torch.inference_mode():
            ids = self.model.generate(features.to(self.device, self.dtype), **kwargs)
        return [t.strip() for t in self.processor.batch_decode(ids, skip_special_tokens=True)]

    def _language(self, name: str | None) -> str | None:
        """The row's language as the model's code, or None (the model detects it)."""
        from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

        config = self.model.generation_config
        known = getattr(config, "lang_to_id", None) or {}
        if not name or not getattr(config, "is_multilingual", bool(known)):
            return None
        code = TO_LANGUAGE_CODE.get(name.strip().lower(), name.strip().lower())
        return code if f"<|{code}|>" in known else None
