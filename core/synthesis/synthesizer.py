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
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import nullcontext

import numpy as np
import torch

from qtts.core.engine.device.cpu_runtime import apply_cpu_budget, describe_cpu_budget, trim_heap
from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.plan.planner import MemoryPlan
from qtts.core.engine.step.layer_path import prepare_weights
from qtts.core.engine.step.token_choice import RowParams
from qtts.core.engine.vocoder.decoder_kernels import with_kernels
from qtts.core.engine.vocoder.vocoder_graphs import GraphedVocoder
from qtts.core.engine.vocoder.vocoder_windows import JOIN_WASTE, bucket_shapes, decode_bucketed
from qtts.core.model.hub import ModelLoadError
from qtts.core.model.loader import (
    parse_device,
    parse_dtype,
    use_device,
)
from qtts.core.model.weights import load_weights
from qtts.core.synthesis.decode_overlap import (
    decode_stream,
    overlapped,
    prioritized,
    vocoder_stream,
)
from qtts.core.synthesis.device_gate import DeviceGate
from qtts.core.synthesis.oom_backoff import OomBackoff
from qtts.core.synthesis.prompt import (
    PromptTokens,
    embed_clone_prompt,
    embed_prompt,
    pad_embedding,
    prompt_tokens,
)
from qtts.core.synthesis.requests import GenerationOptions, Request, RowFailure, Utterance
from qtts.core.synthesis.retry import Attempt
from qtts.core.synthesis.synthesis_clock import SynthesisClock

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
        self.dtype = model.talker.codec_head.weight.dtype
        # Read once: the memory plan and every engine pass of this synthesizer run the same engine.
        self.tuning = tuning or EngineTuning.for_device(device, dtype=self.dtype)
        if generator == "engine":
            prepare_weights(model, self.tuning.layer_path)  # on their device, in their dtype
        # The speech decoder's windows replay CUDA graphs where decode steps do (one per window
        # shape, captured as each is first met); elsewhere the decoder runs eagerly. Its kernels
        # serve it on CUDA either way.
        decoder = with_kernels(
            decoder, gemm=self.tuning.decoder_gemm, choices=self.tuning.decoder_conv_choices
        )
        # One stream for the vocoder's work, for the synthesizer's life: the graphs' static
        # buffers outlive one synthesize call, so they must not belong to a recycled stream.
        cuda = device.type == "cuda"
        self.vocoder_stream = vocoder_stream(device, self.tuning.vocoder_sms) if cuda else None
        self.vocoder = (
            GraphedVocoder(
                decoder,
                NAIVE_BATCH,
                capture_stream=self._split_stream(),
                graph_max=self.tuning.vocoder_graph_max,
            )
            if self.tuning.cuda_graphs
            else decoder
        )
        # Rows per speech-decoder call: the engine path sets it from its memory plan.
        self.vocoder_rows = self._vocoder_backoff(NAIVE_BATCH)
        # The decode loop's stream, of the highest priority, for the same reason; None: the
        # caller's stream (a CPU, or QTTS_DECODE_PRIORITY=0).
        self.decode_stream = decode_stream(device) if self.tuning.decode_priority else None
        self.tts_pad = pad_embedding(model.talker, self.config)
        self.references = None  # Base: reference prompts, each computed once per job
        # Held by graph capture, a pass's build and empty_cache (decode side, first) and by the
        # vocoder thread per micro-batch: no device work from another thread may run while a
        # CUDA graph is being captured.
        self.device_gate = DeviceGate()
        self.clock = SynthesisClock()  # where this synthesizer's time went (host counts only)
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
        if synth.tuning.threads is not None:
            kept = apply_cpu_budget(synth.tuning.threads, synth.tuning.vocoder_thread)
            log.info("cpu: %s", describe_cpu_budget(kept=kept))
        return synth

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
        work = lambda group: list(self._vocode(group))  # noqa: E731
        return overlapped(
            prioritized(finished, self.decode_stream),
            work,
            self.device,
            gate=self.device_gate,
            stream=self.vocoder_stream,
            inline=not self.tuning.vocoder_thread,
            clock=self.clock,
        )

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

        gen = NaiveGenerator(self.model, self.config, self.tts_pad)
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
            tuning=self.tuning,
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
        self.vocoder_rows = self._vocoder_backoff(plan.vocoder_batch)
        if self.vocoder is not self.decoder:  # no vocoder work in flight before the first group
            self.vocoder.reserve(plan.vocoder_batch)
            if self.tuning.vocoder_capture == "ahead":
                self._capture_vocoder()
        slots_at_once = OomBackoff(
            plan.slots, what="slots", device=self.device, gate=self.device_gate
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

    def _vocoder_backoff(self, size: int) -> OomBackoff:
        """Rows per speech-decoder call; a halving re-arms the vocoder's graphs at the new size.
        No gate of its own: the vocoder holds the device gate around its halving and freeing."""
        graphed = self.vocoder is not self.decoder
        reserve = self.vocoder.reserve if graphed else None
        return OomBackoff(size, what="vocoder rows", device=self.device, on_shrink=reserve)

    def _capture_vocoder(self) -> None:
        """Every window shape of the plan's vocoder batch captured now, before decoding starts,
        holding the device gate (QTTS_VOCODER_CAPTURE=ahead; by default each shape is captured
        when the vocoder first meets it). Out of memory halves the rows per call, as it does
        while vocoding."""
        rows, captured = self.vocoder_rows, []
        start, before = time.perf_counter(), len(self.vocoder.graphs)
        for attempt in rows.tries(lambda: not captured, gate=lambda: self.device_gate):
            with attempt, self.device_gate, self._on_vocoder_stream():
                self.vocoder.capture_all(bucket_shapes(attempt.rows), self.device)
                captured.append(True)
        took = time.perf_counter() - start
        self.clock.vocoder_capture_s += took
        if len(self.vocoder.graphs) > before:
            log.info(
                "vocoder: %d window graphs captured in %.1f s",
                len(self.vocoder.graphs) - before,
                took,
            )

    def _split_stream(self) -> torch.cuda.Stream | None:
        """The vocoder's stream where it is limited to part of the SMs (its graphs are captured
        there, or their replay would ignore the limit); None: graphs capture on their own."""
        return self.vocoder_stream if self.tuning.vocoder_sms else None

    def _on_vocoder_stream(self):
        """The vocoder's stream, after the current one: its static buffers belong to the stream
        that uses them, so freeing them (a new reservation) never races the decode stream."""
        if self.vocoder_stream is None:
            return nullcontext()
        self.vocoder_stream.wait_stream(torch.cuda.current_stream(self.device))
        return torch.cuda.stream(self.vocoder_stream)

    def _engine_pass(self, requests, tokens, order: list[int], slots: int, group, options):
        from qtts.core.engine.loop.build import EngineShape, build_engine
        from qtts.core.engine.loop.scheduler import EngineRequest, run_continuous

        # Every graph this pass can need is captured before its first prefill, with no vocoder
        # work in flight (the vocoder thread holds the same gate around each micro-batch). Out of
        # memory goes to the halving retry; any other capture failure costs speed, not the job.
        start = time.perf_counter()
        engine, step = build_engine(
            self.model,
            self.config,
            EngineShape.of(group, slots),
            tts_pad=self.tts_pad,
            talker=options.talker,
            subtalker=options.subtalker,
            dtype=self.dtype,
            device=self.device,
            tuning=self.tuning,
            gate=self.device_gate,
            on_capture_error=lambda e: log.warning("%s; decoding this pass without CUDA graphs", e),
        )
        self.clock.passes += 1
        self.clock.pass_build_s += time.perf_counter() - start

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
            self.clock.frames += int(result.codes.shape[0])  # kept or not, the engine made them
            follow_up = attempt.after(requests[attempt.row], result.hit_budget, options.attempts)
            return None if follow_up is None else engine_request(follow_up)

        engine_requests = (engine_request(Attempt.first(i, requests[i])) for i in order)
        counted = self.clock.counting_step(step or engine.decode_step, slots)
        yield from run_continuous(engine, engine_requests, step=counted, again=again)

    def _vocode(self, group) -> Iterator[Utterance | RowFailure]:
        """The speech decoder on at most `vocoder_rows.size` rows at once; out of memory halves the
        micro-batch and redoes only the rows not decoded yet (the decode is deterministic)."""
        done, start = 0, time.perf_counter()
        graphed = self.vocoder if self.vocoder is not self.decoder else None
        captured_s = graphed.capture_s if graphed is not None else 0.0
        # The gate per micro-batch: a capture or a build on the decode side waits for this one
        # call at most (device_gate.py); the halving's re-arm runs under it, its free under
        # another hold of it.
        for attempt in self.vocoder_rows.tries(
            lambda: done < len(group),  # noqa: B023 (the rows decoded so far, read each try)
            gate=self.device_gate.yielding,
        ):
            batch = group[done : done + attempt.size]
            attempt.rows = len(batch)
            with self.device_gate.yielding(), attempt:
                out = list(self._vocode_batch(batch))
            if attempt.failed:
                continue
            done += len(batch)
            yield from out
        self.clock.vocoder_s += time.perf_counter() - start
        if graphed is not None:  # the shapes this group met first: captured on this thread
            self.clock.vocoder_first_met_s += graphed.capture_s - captured_s
            self.clock.vocoder_graphs = graphed.captures

    def _vocode_batch(self, group) -> Iterator[Utterance | RowFailure]:
        # ICL rows decode reference ++ generated codes; the reference part is cut off after.
        refs = [self._ref_code(req) for req, *_ in group]
        full = [
            codes if ref is None else torch.cat((ref.to(codes.device), codes))
            for (_, codes, *_), ref in zip(group, refs, strict=True)
        ]
        join = JOIN_WASTE if self.tuning.vocoder_join else 0.0
        codes_on = [c.to(self.device) for c in full]
        forward = self.clock.counting_window(self.vocoder)
        audio = decode_bucketed(self.decoder, codes_on, forward, join_waste=join)
        for (req, codes, hit, tried), wav, ref, whole in zip(group, audio, refs, full, strict=True):
            wav = wav.float().cpu().numpy()
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
