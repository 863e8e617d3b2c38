"""Opening a checkpoint for a job: the cheap text side first (to validate every row), weights after.

Implements the TextModel and Synthesizer protocols of qtts.core.jobs.interfaces on the real model.
Knows the checkpoint layout and the generator; knows nothing of manifests or output files.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from qtts.core.model.config import GenerationDefaults, ModelConfig
from qtts.core.model.hub import ModelLoadError, check_layout, resolve_model_dir

log = logging.getLogger("qtts")


class CheckpointText:
    """Config + tokenizer of one checkpoint (the TextModel protocol)."""

    def __init__(self, name: str, model_dir: Path):
        self.name = name
        self.model_dir = model_dir
        try:
            self.config = ModelConfig.from_file(model_dir / "config.json")
            self.defaults = GenerationDefaults.from_file(model_dir / "generation_config.json")
            st = json.loads((model_dir / "speech_tokenizer" / "config.json").read_text("utf-8"))
        except (ValueError, OSError) as e:
            raise ModelLoadError(f"{model_dir}: {e}") from None
        self.sample_rate = int(st.get("output_sample_rate", 24000))
        from qtts.core.synthesis.prompt import load_tokenizer

        try:
            self.tokenizer = load_tokenizer(model_dir)
        except Exception as e:  # transformers raises many kinds; the user needs one line
            raise ModelLoadError(f"cannot load the text tokenizer in {model_dir}: {e}") from None

    def normalize_row(self, speaker, language, instruct):
        from qtts.core.synthesis.prompt import normalize_row

        return normalize_row(self.config, speaker, language, instruct)

    def count_text_tokens(self, text: str) -> int:
        return len(self.tokenizer(text)["input_ids"])


def open_text_model(model: str) -> CheckpointText:
    model_dir = resolve_model_dir(model)
    check_layout(model_dir)
    return CheckpointText(model, model_dir)


def load_synthesizer(
    text_model: CheckpointText, device: str, dtype: str, batch_size: int | None = None
):
    """Weights on the device. QTTS_GENERATOR=naive runs the yardstick instead of the engine."""
    from qtts.core.synthesis.synthesizer import Synthesizer

    generator = os.environ.get("QTTS_GENERATOR", "engine")
    return Synthesizer.load(text_model, device, dtype, batch_size=batch_size, generator=generator)
