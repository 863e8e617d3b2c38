"""Requests -> utterances on a loaded checkpoint: prompts, generation, vocoder, guards.

Loads the talker and the speech-tokenizer decoder strictly from the checkpoint, builds prompts,
runs a generator over each batch it is given, decodes finished codes to audio, and fails a row on
its own (non-finite audio). Knows tensors and token ids; no manifests, no output files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from qtts.core.codec import SpeechDecoder, SpeechDecoderConfig, decode_utterances
from qtts.core.hub import ModelLoadError
from qtts.core.loader import load_strict, parse_device, parse_dtype, read_safetensors
from qtts.core.model import build_model
from qtts.core.prompt import embed_prompt, pad_embedding, prompt_tokens
from qtts.core.reference import GenerationInputs, ReferenceGenerator
from qtts.core.requests import GenerationOptions, Request, RowFailure, Utterance
from qtts.core.sampling import RowParams

log = logging.getLogger("qtts")


def load_weights(text_model, device: torch.device, dtype: torch.dtype):
    """(model, decoder) with every tensor checked against the checkpoint, on `device` in `dtype`."""
    model_dir, config = text_model.model_dir, text_model.config
    if config.tts_model_type == "base":
        raise ModelLoadError("Base (voice clone) checkpoints are not supported yet")
    with torch.device("meta"):
        model = build_model(config)
    tensors = read_safetensors(model_dir)
    load_strict(model, tensors, source=str(model_dir / "model.safetensors"), dtype=dtype,
                device=device)
    st_dir = model_dir / "speech_tokenizer"
    st_config = json.loads((st_dir / "config.json").read_text("utf-8"))
    with torch.device("meta"):
        decoder = SpeechDecoder(SpeechDecoderConfig.from_dict(st_config))
    load_strict(decoder, read_safetensors(st_dir), source=str(st_dir / "model.safetensors"),
                dtype=torch.float32 if device.type == "cpu" else dtype, device=device,
                prefix="decoder.", ignore_prefixes=("encoder.",))
    return model.eval(), decoder.eval()


class ReferenceSynthesizer:
    """The Synthesizer protocol on the reference generator (one padded batch per call chunk)."""

    def __init__(self, text_model, model, decoder, device: torch.device, batch_size: int = 16):
        self.text_model = text_model
        self.config = text_model.config
        self.model, self.decoder, self.device = model, decoder, device
        self.batch_size = batch_size
        self.tts_pad = pad_embedding(model.talker, self.config)
        self.generator = ReferenceGenerator(model, self.config, self.tts_pad)

    @classmethod
    def load(cls, text_model, device: str, dtype: str, batch_size: int = 16):
        try:
            dev = parse_device(device)
            dt = parse_dtype(dtype, dev)
        except ValueError as e:
            raise ModelLoadError(str(e)) from None
        model, decoder = load_weights(text_model, dev, dt)
        return cls(text_model, model, decoder, dev, batch_size)

    def synthesize(
        self, requests: Sequence[Request], options: GenerationOptions
    ) -> Iterator[Utterance | RowFailure]:
        for start in range(0, len(requests), self.batch_size):
            yield from self._run_batch(list(requests[start : start + self.batch_size]), options)

    def _run_batch(self, batch: list[Request], options: GenerationOptions):
        tok = self.text_model.tokenizer
        prompts = [
            embed_prompt(
                self.model.talker, self.config,
                prompt_tokens(self.config, tok, r.text, r.speaker, r.language, r.instruct),
            )
            for r in batch
        ]
        n, t, s = len(batch), options.talker, options.subtalker
        inputs = GenerationInputs(
            prompts=prompts,
            max_new_tokens=[r.max_new_tokens for r in batch],
            seeds=[r.seed for r in batch],
            talker=RowParams.fill(n, self.device, greedy=not t.do_sample, temperature=t.temperature,
                                  top_k=t.top_k, top_p=t.top_p, penalty=t.repetition_penalty),
            subtalker=RowParams.fill(n, self.device, greedy=not s.do_sample,
                                     temperature=s.temperature, top_k=s.top_k, top_p=s.top_p),
        )
        results = self.generator.generate(inputs)
        audio = decode_utterances(self.decoder, [r.codes.to(self.device) for r in results])
        for req, res, wav in zip(batch, results, audio, strict=True):
            wav = wav.float().cpu().numpy()
            if not np.isfinite(wav).all():
                yield RowFailure(req.id, "non-finite audio (NaN or inf) from the decoder")
                continue
            yield Utterance(req.id, res.codes.numpy().astype(np.int64), wav,
                            self.text_model.sample_rate, res.hit_budget)
