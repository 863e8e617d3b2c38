"""Requests -> utterances on a loaded checkpoint: prompts, generation, vocoder, guards.

Loads the talker and the speech-tokenizer decoder strictly from the checkpoint, builds prompts,
generates codes with the fast engine (continuous batching over `batch_size` slots; the default) or
the reference generator (static batches; the yardstick), decodes finished codes to audio in batches,
and fails a row on its own (non-finite audio). Knows tensors and token ids; no manifests, no files.
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
from qtts.core.prompt import embed_prompt, pad_embedding, prompt_length, prompt_tokens
from qtts.core.requests import GenerationOptions, Request, RowFailure, Utterance
from qtts.core.sampling import RowParams

log = logging.getLogger("qtts")
GENERATORS = ("engine", "reference")


def load_weights(text_model, device: torch.device, dtype: torch.dtype):
    """(model, decoder) with every tensor checked against the checkpoint, on `device` in `dtype`."""
    model_dir, config = text_model.model_dir, text_model.config
    if config.tts_model_type == "base":
        raise ModelLoadError("Base (voice clone) checkpoints are not supported yet")
    with torch.device("meta"):
        model = build_model(config)
    load_strict(
        model,
        read_safetensors(model_dir),
        source=str(model_dir / "model.safetensors"),
        dtype=dtype,
        device=device,
    )
    st_dir = model_dir / "speech_tokenizer"
    st_config = json.loads((st_dir / "config.json").read_text("utf-8"))
    with torch.device("meta"):
        decoder = SpeechDecoder(SpeechDecoderConfig.from_dict(st_config))
    # The decoder stays fp32 on CPU (as the official code runs it); on GPU it follows --dtype.
    load_strict(
        decoder,
        read_safetensors(st_dir),
        source=str(st_dir / "model.safetensors"),
        dtype=torch.float32 if device.type == "cpu" else dtype,
        device=device,
        prefix="decoder.",
        ignore_prefixes=("encoder.",),
    )
    return model.eval(), decoder.eval()


def row_params(options: GenerationOptions, n: int, device) -> tuple[RowParams, RowParams]:
    t, s = options.talker, options.subtalker
    talker = RowParams.fill(
        n,
        device,
        greedy=not t.do_sample,
        temperature=t.temperature,
        top_k=t.top_k,
        top_p=t.top_p,
        penalty=t.repetition_penalty,
    )
    sub = RowParams.fill(
        n, device, greedy=not s.do_sample, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p
    )
    return talker, sub


class Synthesizer:
    """The Synthesizer protocol (qtts.core.interfaces) on a loaded checkpoint."""

    def __init__(
        self,
        text_model,
        model,
        decoder,
        device: torch.device,
        *,
        batch_size: int = 16,
        generator: str = "engine",
    ):
        if generator not in GENERATORS:
            raise ValueError(f"generator must be one of {GENERATORS}, not {generator!r}")
        self.text_model, self.config = text_model, text_model.config
        self.model, self.decoder, self.device = model, decoder, device
        self.batch_size, self.generator = batch_size, generator
        self.tts_pad = pad_embedding(model.talker, self.config)

    @classmethod
    def load(cls, text_model, device: str, dtype: str, **kwargs) -> Synthesizer:
        try:
            dev = parse_device(device)
            dt = parse_dtype(dtype, dev)
        except ValueError as e:
            raise ModelLoadError(str(e)) from None
        model, decoder = load_weights(text_model, dev, dt)
        return cls(text_model, model, decoder, dev, **kwargs)

    def synthesize(
        self, requests: Sequence[Request], options: GenerationOptions
    ) -> Iterator[Utterance | RowFailure]:
        requests = list(requests)
        if not requests:
            return
        tokens = [
            prompt_tokens(
                self.config, self.text_model.tokenizer, r.text, r.speaker, r.language, r.instruct
            )
            for r in requests
        ]
        if self.generator == "reference":
            finished = self._reference(requests, tokens, options)
        else:
            finished = self._engine(requests, tokens, options)
        for group in finished:  # [(request, codes [F, G] tensor, hit_budget)]
            yield from self._vocode(group)

    def _prompt(self, tokens):
        return embed_prompt(self.model.talker, self.config, tokens)

    def _reference(self, requests, tokens, options):
        from qtts.core.reference import GenerationInputs, ReferenceGenerator

        gen = ReferenceGenerator(self.model, self.config, self.tts_pad)
        for start in range(0, len(requests), self.batch_size):
            batch = requests[start : start + self.batch_size]
            talker, sub = row_params(options, len(batch), self.device)
            out = gen.generate(
                GenerationInputs(
                    [self._prompt(t) for t in tokens[start : start + self.batch_size]],
                    [r.max_new_tokens for r in batch],
                    [r.seed for r in batch],
                    talker,
                    sub,
                )
            )
            yield [(r, o.codes, o.hit_budget) for r, o in zip(batch, out, strict=True)]

    def _engine(self, requests, tokens, options):
        from qtts.core.engine import Engine, SlotState
        from qtts.core.runner import EngineJob, run_continuous

        slots = min(self.batch_size, len(requests))
        max_len = max(
            prompt_length(t) + r.max_new_tokens for t, r in zip(tokens, requests, strict=True)
        )
        max_frames = max(r.max_new_tokens for r in requests)
        dtype = self.model.talker.codec_head.weight.dtype
        state = SlotState(
            self.config, slots, max_len + 1, max_frames, 1, dtype=dtype, device=self.device
        )
        engine = Engine(self.model, self.config, state, self.tts_pad)
        talker, sub = row_params(options, 1, self.device)
        jobs = (
            EngineJob(
                key=i,
                prompt=lambda t=t: self._prompt(t),
                budget=r.max_new_tokens,
                seed=r.seed,
                talker=talker,
                subtalker=sub,
            )
            for i, (r, t) in enumerate(zip(requests, tokens, strict=True))
        )
        check_every = 1 if self.device.type == "cpu" else 8  # a CPU sync costs nothing
        bucket = 64 if self.device.type == "cpu" else 256
        for done in run_continuous(engine, jobs, check_every=check_every, view_bucket=bucket):
            yield [(requests[d.key], d.codes, d.hit_budget) for d in done]

    def _vocode(self, group) -> Iterator[Utterance | RowFailure]:
        audio = decode_utterances(self.decoder, [codes.to(self.device) for _, codes, _ in group])
        for (req, codes, hit), wav in zip(group, audio, strict=True):
            wav = wav.float().cpu().numpy()
            if not np.isfinite(wav).all():
                yield RowFailure(req.id, "non-finite audio (NaN or inf) from the decoder")
                continue
            codes = codes.cpu().numpy().astype(np.int64)
            yield Utterance(req.id, codes, wav, self.text_model.sample_rate, hit)
