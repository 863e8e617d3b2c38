"""Opening a checkpoint for a job: the cheap text side first (to validate every row), weights after.

Implements the TextModel and Synthesizer protocols of qtts.core.jobs.contract.interfaces on the
real model. Knows the checkpoint layout and the generator; knows nothing of manifests or output
files.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

from qtts.core.model.config import GenerationDefaults, ModelConfig
from qtts.core.model.hub import (
    ModelLoadError,
    check_checkpoint_files,
    checkpoint_identity,
    resolve_model_dir,
)
from qtts.core.synthesis.requests import Placement

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

    def count_text_tokens(self, texts) -> list[int]:
        """len(tokenizer(text)["input_ids"]) of each text, in one batched call."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:  # the Rust tokenizer directly: the same ids, less overhead
            return [len(e) for e in backend.encode_batch(list(texts), add_special_tokens=True)]
        return [len(ids) for ids in self.tokenizer(list(texts))["input_ids"]]

    @property
    def max_tokens_per_byte(self) -> float | None:
        """A byte-level BPE gives at most one token per byte of its normalized (NFC) text, and
        NFC makes a UTF-8 text at most 3 times longer; other tokenizers: unknown."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        return 3.0 if backend is not None and "ByteLevel" in repr(backend.pre_tokenizer) else None

    @functools.cached_property
    def identity(self) -> str:
        return checkpoint_identity(self.model_dir)

    @functools.cached_property
    def voice_identity(self) -> str | None:
        from qtts.core.model.voice_identity import voice_identity

        try:
            return voice_identity(self.model_dir)
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"{self.model_dir}: cannot read its encoders: {e}") from None

    def resolve_precision(self, device: str, dtype: str) -> tuple[str, str, str]:
        from qtts.core.errors import UsageError
        from qtts.core.model.cpu_precision import auto_cpu_precision

        if device.strip().lower() == "cpu":  # torch is not needed to say so
            if dtype != "auto":
                return "cpu", dtype, ""
            auto = auto_cpu_precision()
            return "cpu", auto.dtype, auto.reason
        from qtts.core.model.loader import parse_device, parse_dtype

        try:
            dev = parse_device(device)
            dt = str(parse_dtype(dtype, dev)).removeprefix("torch.")
        except ValueError as e:
            raise UsageError(str(e)) from None
        if dtype != "auto":
            return dev.type, dt, ""
        why = auto_cpu_precision().reason if dev.type == "cpu" else f"{dt} on {dev.type.upper()}"
        return dev.type, dt, why

    def precision(self, device: str, dtype: str) -> str:
        """The fingerprint's spelling: "cuda:bfloat16"."""
        kind, dt, _ = self.resolve_precision(device, dtype)
        return f"{kind}:{dt}"

    def memory_plan(self, requests, placement: Placement) -> str:
        from qtts.core.synthesis.memory_plan import plan_without_weights

        return plan_without_weights(self, requests, placement).summary()


def open_text_model(model: str) -> CheckpointText:
    model_dir = resolve_model_dir(model)
    check_checkpoint_files(model_dir)
    return CheckpointText(model, model_dir)


def load_synthesizer(text_model: CheckpointText, placement: Placement):
    """Weights on the device. QTTS_GENERATOR=naive runs the yardstick instead of the engine."""
    from qtts.core.engine.device.tuning import synthesis_generator
    from qtts.core.synthesis.synthesizer import Synthesizer

    return Synthesizer.load(
        text_model,
        placement.device,
        placement.dtype,
        batch_size=placement.batch_size,
        generator=synthesis_generator(),
    )
