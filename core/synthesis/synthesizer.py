"""Requests -> utterances on a loaded checkpoint: prompts, generation, vocoder, guards.

Loads the talker and the speech-tokenizer decoder strictly from the checkpoint, builds prompts,
generates codes with the fast engine (continuous batching over `batch_size` slots; the default) or
the naive generator (static batches; the yardstick), runs a row that hits its frame budget again
while attempts remain (qtts.core.synthesis.retry), decodes finished codes to audio in batches,
and fails a row on its own (non-finite audio). `Synthesizer.synthesize` reads as that pass
(docs/architecture.md, "One pass"). Knows tensors and token ids; no manifests, no files.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from functools import partial

import numpy as np
import torch

from qtts.core.engine.device.cpu_runtime import apply_cpu_budget, describe_cpu_budget, trim_heap
from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.loop.scheduler import EngineRequest
from qtts.core.engine.plan.planner import MemoryPlan
from qtts.core.engine.step.layer_path import prepare_weights
from qtts.core.engine.step.token_choice import RowParams
from qtts.core.model.hub import ModelLoadError
from qtts.core.model.loader import (
    parse_device,
    parse_dtype,
    use_device,
)
from qtts.core.model.weights import load_weights
from qtts.core.synthesis.engine_driver import EngineDriver, EngineShape
from qtts.core.synthesis.oom_backoff import OomBackoff
from qtts.core.synthesis.prompt import (
    PromptTokens,
    embed_clone_prompt,
    embed_prompt,
    prompt_tokens,
)
from qtts.core.synthesis.requests import GenerationOptions, Request, RowFailure, Utterance
from qtts.core.synthesis.retry import Attempt
from qtts.core.synthesis.synthesis_clock import SynthesisClock
from qtts.core.synthesis.vocoding import Vocoding

log = logging.getLogger("qtts")
GENERATORS = ("engine", "naive")
NAIVE_BATCH = 16  # the naive generator's batch (it is not memory-planned: a yardstick)
# A finished row: its request, its codes [F, G], whether it hit its frame budget, the attempt kept
Finished = tuple[Request, torch.Tensor, bool, Attempt]


def row_params(options: GenerationOptions, n: int, device) -> tuple[RowParams, RowParams]:
    return (
        RowParams.from_sampling(options.talker, n, device),
        RowParams.from_sampling(options.subtalker, n, device),
    )


class Synthesizer:
    """The Synthesizer protocol (qtts.core.jobs.contract.interfaces) on a loaded checkpoint."""

    def __init__(
        self,
        text_model,
        model,
        decoder,
        device: torch.device,
        *,
        batch_size: int | None = None,
        generator: str = "engine",
        tuning: EngineTuning | None = None,
    ):
        if generator not in GENERATORS:
            raise ValueError(f"generator must be one of {GENERATORS}, not {generator!r}")
        self.text_model, self.config = text_model, text_model.config
        self.model, self.decoder, self.device = model, decoder, device
        self.batch_size, self.generator = batch_size, generator  # batch_size None: planned
        # Read once: the memory plan and every engine pass of this synthesizer run the same engine.
        dtype = model.talker.codec_head.weight.dtype
        tuning = tuning or EngineTuning.for_device(device, dtype=dtype)
        if generator == "engine":
            prepare_weights(model, tuning.layer_path)  # on their device, in their dtype
        # Any capture failure but out of memory costs speed, not the job: a pass goes eager.
        self.driver = EngineDriver(model, self.config, device, tuning, tolerate_capture=True)
        # Rows per speech-decoder call: the engine path sets it from its memory plan.
        self.vocoding = Vocoding(decoder, self.driver, NAIVE_BATCH)
        self.references = None  # Base: reference prompts, each computed once per job
        if self.config.tts_model_type == "base":
            from qtts.core.synthesis.voice_clone import ReferenceCache, SpeechEncoder

            st_dir = text_model.model_dir / "speech_tokenizer"
            st_config = json.loads((st_dir / "config.json").read_text("utf-8"))
            self.references = ReferenceCache(
                model.speaker_encoder, lambda: SpeechEncoder(st_dir, st_config, device)
            )

    @classmethod
    def load(cls, text_model, device: str, dtype: str, **kwargs) -> Synthesizer:
        try:
            dev = parse_device(device)
            dt = parse_dtype(dtype, dev)
        except ValueError as e:
            raise ModelLoadError(str(e)) from None
        use_device(dev)
        model, decoder = load_weights(text_model.model_dir, text_model.config, dev, dt)
        synth = cls(text_model, model, decoder, dev, **kwargs)
        # A job's process: a CPU's thread budget and allocator (nothing on GPU). Set here, not
        # by every Synthesizer, because it is process-wide.
        tuning = synth.driver.tuning
        if tuning.threads is not None:
            kept = apply_cpu_budget(tuning.threads, tuning.vocoder_thread)
            log.info("cpu: %s", describe_cpu_budget(kept=kept))
        return synth

    @property
    def clock(self) -> SynthesisClock:
        """Where this synthesizer's time went (host counts only): the job's summary reads it."""
        return self.driver.clock

    def synthesize(
        self, requests: Sequence[Request], options: GenerationOptions
    ) -> Iterator[Utterance | RowFailure]:
        """Requests -> utterances, each row as it finishes: prompts (a row that cannot run fails
        alone, first) -> the memory plan and its engine passes (codes, a length group at a time)
        -> the vocoder's windows (audio)."""
        requests = list(requests)
        if not requests:
            return
        requests, tokens, failed = self._prompts(requests)
        yield from failed
        if not requests:
            return
        codes = self._generate(requests, tokens, options)
        for utterances in self._vocoded(codes):
            yield from utterances
        trim_heap()  # a CPU job's kept blocks: reused within this call, not beyond it

    def _prompts(
        self, requests: list[Request]
    ) -> tuple[list[Request], list[PromptTokens], list[RowFailure]]:
        """(requests, prompt tokens, failures): a Base row whose reference is unusable, or a row
        too long for the talker's positions, fails alone."""
        tokens = [
            prompt_tokens(
                self.config,
                self.text_model.tokenizer,
                text=r.text,
                speaker=r.speaker,
                language=r.language,
                instruct=r.instruct,
            )
            for r in requests
        ]
        failed = []
        if self.references is not None:  # Base: resolve references; bad ones fail their rows
            from qtts.core.synthesis.voice_clone import clone_inputs

            requests, tokens, failed = clone_inputs(
                self.references, self.text_model.tokenizer, requests, tokens
            )
        requests, tokens, too_long = self._within_positions(requests, tokens)
        return requests, tokens, failed + too_long

    def _generate(
        self, requests: list[Request], tokens: list[PromptTokens], options: GenerationOptions
    ) -> Iterator[list[Finished]]:
        """Finished codes, a group at a time: [(request, codes [F, G], hit_budget, Attempt
        kept)]. Lazy: the plan and its passes run as groups are asked for (on the decode stream)."""
        if self.generator == "naive":
            return self._naive(requests, tokens, options)
        return self._engine(requests, tokens, options)

    def _vocoded(
        self, finished: Iterator[list[Finished]]
    ) -> Iterator[list[Utterance | RowFailure]]:
        """Each finished group's utterances and failures, in order. The vocoder runs beside the
        decode loop (GPU), or after each finished group on the decode thread (a CPU's serial
        budget: core/engine/device/cpu_runtime.py)."""
        work = partial(self.vocoding.in_micro_batches, decode=self._vocode_batch)
        return self.driver.overlapped(finished, work)

    def _within_positions(self, requests, tokens):
        """(requests, tokens, failures): a row whose prompt plus frame budget would run past the
        positions the talker was trained on fails alone (its KV cache and RoPE positions too)."""
        from qtts.core.synthesis.prompt import prompt_length

        limit = self.config.talker.max_position_embeddings
        kept, kept_tokens, failed = [], [], []
        for r, t in zip(requests, tokens, strict=True):
            need = prompt_length(t) + r.max_new_tokens
            if need > limit:
                failed.append(
                    RowFailure(
                        r.id,
                        f"prompt ({prompt_length(t)} positions) plus "
                        f"max_new_tokens {r.max_new_tokens} exceeds the model's {limit} "
                        "positions; shorten or split the text",
                    )
                )
            else:
                kept.append(r)
                kept_tokens.append(t)
        return kept, kept_tokens, failed

    def _prompt(self, tokens):
        if tokens.clone:
            ref = self.references.get(tokens.ref_audio, tokens.ref_text, tokens.voice)
            talker = self.model.talker
            return embed_clone_prompt(talker, self.config, tokens, ref.x_vector, ref.ref_code)
        return embed_prompt(self.model.talker, self.config, tokens)

    def _naive(self, requests, tokens, options):
        """Static batches in request order; a row's next attempt joins the queue's end (the last
        partial batch may then share its batch with retries: codes are batch-invariant)."""
        from qtts.core.synthesis.naive_generator import GenerationInputs, NaiveGenerator

        gen = NaiveGenerator(self.model, self.config, self.driver.tts_pad)
        size = self.batch_size or NAIVE_BATCH
        queue = deque(Attempt.first(i, r) for i, r in enumerate(requests))
        while queue:
            batch = [queue.popleft() for _ in range(min(size, len(queue)))]
            talker, sub = row_params(options, len(batch), self.device)
            out = gen.generate(
                GenerationInputs(
                    [self._prompt(tokens[a.row]) for a in batch],
                    [requests[a.row].max_new_tokens for a in batch],
                    [a.seed for a in batch],
                    talker,
                    sub,
                )
            )
            kept = []
            for a, o in zip(batch, out, strict=True):
                follow_up = a.after(requests[a.row], o.hit_budget, options.attempts)
                if follow_up is None:
                    kept.append((requests[a.row], o.codes, o.hit_budget, a))
                else:
                    queue.append(follow_up)
            if kept:
                yield kept

    def plan(self, requests, tokens) -> MemoryPlan:
        """The memory plan of these rows on this device (raises MemoryPlanError if an explicit
        batch size, or even one slot, cannot fit)."""
        from qtts.core.synthesis.memory_plan import plan_rows

        base = self.references is not None  # Base: voice-clone rows load the Mimi encoder
        encoder = self.text_model.model_dir / "speech_tokenizer" if base else None
        return plan_rows(
            self.config,
            self.model,
            self.decoder,
            budgets=[r.max_new_tokens for r in requests],
            tokens=tokens,
            device=self.device,
            tuning=self.driver.tuning,
            batch_size=self.batch_size,
            encoder_dir=encoder,
        )

    def _engine(self, requests, tokens, options):
        """Continuous batching, one engine pass per length group of the memory plan. Out of
        memory anywhere in a pass (prefill, decode, graph capture): halve the slots and rerun
        what is unfinished (seeded draws make the rerun produce what the first attempt would
        have; a row being retried starts again at its first try, and reaches the same one);
        the halved count holds for the groups after it."""
        plan = self.plan(requests, tokens)
        log.info(plan.summary())
        self.vocoding.plan(plan.vocoder_batch)  # no vocoder work in flight before the first group
        slots_at_once = OomBackoff(
            plan.slots, what="slots", device=self.device, gate=self.driver.gate
        )
        for group in plan.groups:
            pending = set(group.rows)
            for attempt in slots_at_once.tries(lambda p=pending: bool(p)):
                attempt.rows = min(group.slots, attempt.size, len(pending))
                order = [i for i in group.rows if i in pending]  # longest KV need first
                with attempt:
                    for done in self._engine_pass(
                        requests, tokens, order, attempt.rows, group, options=options
                    ):
                        pending.difference_update(d.key.row for d in done)
                        yield [(requests[d.key.row], d.codes, d.hit_budget, d.key) for d in done]
            trim_heap()  # the group's KV cache is free: the next group sizes its own

    def _engine_pass(self, requests, tokens, order: list[int], slots: int, group, options):
        """`order`'s rows and their retries through one engine of `slots` slots for `group`,
        built (its graphs captured) as this generator starts: inside the caller's out-of-memory
        try."""

        def engine_request(attempt: Attempt) -> EngineRequest:
            return EngineRequest(
                key=attempt,
                prompt=lambda t=tokens[attempt.row]: self._prompt(t),
                budget=requests[attempt.row].max_new_tokens,
                seed=attempt.seed,
            )

        def again(done: EngineRequest, result) -> EngineRequest | None:
            # Same prompt and budget as the first try: it belongs to this length group.
            attempt = done.key
            follow_up = attempt.after(requests[attempt.row], result.hit_budget, options.attempts)
            return None if follow_up is None else engine_request(follow_up)

        firsts = (engine_request(Attempt.first(i, requests[i])) for i in order)
        engine_pass = self.driver.build(
            EngineShape.of(group, slots), talker=options.talker, subtalker=options.subtalker
        )
        yield from engine_pass.run(firsts, again=again)

    def _vocode_batch(self, group) -> Iterator[Utterance | RowFailure]:
        # ICL rows decode reference ++ generated codes; the reference part is cut off after.
        refs = [self._ref_code(req) for req, *_ in group]
        full = [
            codes if ref is None else torch.cat((ref.to(codes.device), codes))
            for (_, codes, *_), ref in zip(group, refs, strict=True)
        ]
        audio = self.vocoding.decode(full)
        for (req, codes, hit, tried), wav, ref, whole in zip(group, audio, refs, full, strict=True):
            if ref is not None:
                from qtts.core.synthesis.voice_clone import cut_reference

                wav = cut_reference(wav, int(ref.shape[0]), int(whole.shape[0]))
            if not np.isfinite(wav).all():
                yield RowFailure(
                    req.id, "non-finite audio (NaN or inf) from the decoder", tried.number
                )
                continue
            codes = codes.cpu().numpy().astype(np.int64)
            yield Utterance(
                req.id,
                codes,
                wav,
                self.text_model.sample_rate,
                hit,
                attempts=tried.number,
                seed=tried.seed,
            )

    def _ref_code(self, req: Request) -> torch.Tensor | None:
        if self.references is None:
            return None
        return self.references.get(req.ref_audio, req.ref_text, req.voice).ref_code
