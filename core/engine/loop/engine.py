"""The fast path: slot state on the device, one decode step as a pure function of it, slot prefill.

Be paranoid about adding lines to `decode_step`: it runs once per frame for every slot and is what a
CUDA graph captures. It must not call .item(), branch on tensor values or read host state; every
per-slot quantity (lengths, counters, seeds) is a device tensor updated in place, and the sampling
parameters are device tensors set once per engine. Finished and empty slots keep computing (masked
no-ops) until the host loop refills them.
Knows token ids and tensors; no text, no files.
"""

from __future__ import annotations

import torch

from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.loop.refill import pack_refill
from qtts.core.engine.step.decode_attention import attend_grouped
from qtts.core.engine.step.layer_path import layer_steps
from qtts.core.engine.step.slots import SlotFill, SlotState
from qtts.core.engine.step.timer import StepTimer
from qtts.core.engine.step.token_choice import choose_tokens
from qtts.core.model.config import MIN_NEW_TOKENS, ModelConfig


class Engine:
    def __init__(
        self,
        model,
        config: ModelConfig,
        state: SlotState,
        tts_pad: torch.Tensor,
        tuning: EngineTuning | None = None,
    ):
        self.talker, self.config, self.state = model.talker, config, state
        self.tts_pad = tts_pad  # [H]
        self.tuning = tuning or EngineTuning.for_device(tts_pad.device, dtype=tts_pad.dtype)
        self.timer: StepTimer | None = None  # marks prefill and the step's parts (engine.timer)
        # The stacks' decode passes: module, packed or fused (engine.layer_path).
        steps = layer_steps(
            model,
            self.tuning.layer_path,
            state.kv.max_len,
            state.cp_kv.k.shape[3],
            self.tuning.custom_ops,
        )
        self.talker_step, self.predictor_step = steps.talker, steps.predictor
        self.predictor_first = steps.predictor_first
        self.talker_prefill = steps.talker_prefill  # the fused path's; None: the module's forward
        # GPU: attend over the cache view without repeating K/V
        # (qtts.core.engine.step.decode_attention).
        self.decode_attend = attend_grouped if self.tuning.grouped_attention else None
        t = config.talker
        self.eos = t.codec_eos_token_id
        dev = tts_pad.device
        self.suppress = torch.zeros(t.vocab_size, dtype=torch.bool, device=dev)  # [V]
        self.suppress[t.suppress_start :] = True
        self.suppress[self.eos] = False

    # -- prefill (eager, outside any graph) ---------------------------------------------------
    @torch.no_grad()
    def prefill(self, fills: list[SlotFill]) -> None:
        """Run prompts into their slots and sample each one's first c0.

        One fill runs unpadded: exactly the official single-request computation (what the CPU path
        uses, for bitwise parity). Several run as one right-padded, masked batch: one pass instead
        of one per slot (what the GPU path uses; padded query rows still see real keys, no NaN).
        On the fused layer path either runs through the fused ops (engine.fused_stack), its K/V
        written straight into the slots' cache rows. Every host value reaches the device in one
        non-blocking copy (engine.refill) and each per-slot field is written for all fills at
        once, so the cost does not grow per slot."""
        self._timed("prefill", self._prefill, fills)

    def _prefill(self, fills: list[SlotFill]) -> None:
        s = self.state
        self._check(fills)
        m = len(fills)
        table = pack_refill(fills, s.c0.device)
        slots, lengths = table.slot, table.length  # int64 [m]
        width = max(f.prompt.embeds.shape[0] for f in fills)
        if m == 1:
            x = fills[0].prompt.embeds[None]  # [1, L, H]
        else:
            x = self._padded(fills, table, width)
        last, logits = self._run_prompts(x, lengths, s.kv.prefill_writer(slots))  # [m, H], [m, V]
        s.seeds[slots] = table.seed
        s.seen[slots] = False
        first = torch.ones_like(slots, dtype=torch.bool)  # token 0: EOS is blocked
        c0 = self._choose(
            logits,
            s.talker.rows(slots),
            table.seed,
            torch.zeros_like(slots),
            0,
            seen=s.seen[slots],
            block_eos=first,
            eos_id=self.eos,
            suppress=self.suppress,
        )
        s.seen[slots, c0] = True
        s.c0[slots], s.past_hidden[slots] = c0, last
        s.kv.lengths[slots], s.num_tokens[slots], s.budget[slots] = lengths, 1, table.budget
        trailing = torch.cat([f.prompt.trailing for f in fills])  # [sum Tt, H]
        s.trailing[table.trailing_slot, table.trailing_pos] = trailing
        s.trailing_len[slots] = table.trailing_len
        done = table.budget <= 1  # no talker step left: zero frames
        s.finished[slots], s.hit_budget[slots], s.num_frames[slots] = done, done, 0

    def _check(self, fills: list[SlotFill]) -> None:
        """Host-side checks before anything is written (a refused fill leaves the state as is)."""
        s = self.state
        if not fills:
            raise ValueError("prefill needs at least one fill")
        if len({f.slot for f in fills}) != len(fills):
            raise ValueError("prefill: two fills for one slot")
        for f in fills:
            if not 0 <= f.slot < s.slots:
                raise ValueError(f"prefill: slot {f.slot} outside 0..{s.slots - 1}")
            if f.budget < 1:
                raise ValueError(f"prefill: budget {f.budget} (max_new_tokens must be >= 1)")
            # A slot writes K/V at positions < prompt + budget (finished slots keep writing at
            # their length until harvested) and codes at frames < budget: both must fit.
            if f.prompt.embeds.shape[0] + f.budget > s.kv.max_len or f.budget > s.max_frames:
                raise ValueError("prompt + budget exceed the engine's KV cache or code buffer")
            if f.prompt.trailing.shape[0] > s.trailing.shape[1]:
                raise ValueError("trailing text longer than the engine's buffer")

    def _run_prompts(self, x: torch.Tensor, lengths: torch.Tensor, writer):
        """x [m, L, H] through the talker's layers, K/V into the slots -> (final-norm hidden
        [m, H] and fp32 logits [m, V], both at each prompt's last real position)."""
        m, width, _ = x.shape
        if self.talker_prefill is not None:  # fused: only the last positions leave the stack
            last = self.talker_prefill(x, lengths, writer)
            return last, self.talker.codec_head(last).float()
        mask = None if m == 1 else _prompt_mask(lengths, width)
        pos = torch.arange(width, device=x.device).expand(m, width)  # [m, L]
        hidden = self.talker.model(x, pos, mask, writer)  # [m, L, H]
        rows = torch.arange(m, device=x.device)
        if m == 1:  # the official computation: logits at every position, then the last
            logits = self.talker.codec_head(hidden)[rows, lengths - 1].float()  # [1, V]
        else:  # only the last real position of each row: [m, H] -> [m, V]
            logits = self.talker.codec_head(hidden[rows, lengths - 1]).float()
        return hidden[rows, lengths - 1], logits

    @staticmethod
    def _padded(fills: list[SlotFill], table, width: int) -> torch.Tensor:
        """Right-padded prompts [m, L, H], scattered by one indexed write."""
        first = fills[0].prompt.embeds
        x = first.new_zeros(len(fills), width, first.shape[1])  # [m, L, H]
        x[table.prompt_row, table.prompt_pos] = torch.cat([f.prompt.embeds for f in fills])
        return x

    # -- one decode step (graph-capturable) -----------------------------------------------------
    @torch.no_grad()
    def decode_step(self, view_len: int) -> None:
        self._timed("decode_step", self._decode_step, view_len)

    def _decode_step(self, view_len: int) -> None:
        s, talker = self.state, self.talker
        active = ~s.finished  # [B]
        frame = s.num_tokens - 1  # the frame whose residual codes we predict now
        codes = self._timed("predictor", self._predict_codes, frame)  # [B, G]
        s.codes[s.kv.rows, frame.clamp(0, s.max_frames - 1)] = codes
        has_text = frame < s.trailing_len
        text = s.trailing[s.kv.rows, frame.clamp(0, s.trailing.shape[1] - 1)]  # [B, H]
        x = talker.embed_frame(codes) + torch.where(has_text[:, None], text, self.tts_pad)
        mask = s.kv.decode_mask(view_len)  # [B, 1, 1, S]
        pos = s.kv.lengths[:, None]  # [B, 1]
        view = s.kv.decode_view(view_len, self.decode_attend)
        hidden = self._timed(
            "talker_stack", self.talker_step, x[:, None], pos, mask=mask, cache=view
        )
        logits = talker.codec_head(hidden)[:, 0].float()  # [B, V]
        c0 = self._choose(
            logits,
            s.talker,
            s.seeds,
            s.num_tokens,
            0,
            seen=s.seen,
            block_eos=s.num_tokens < MIN_NEW_TOKENS,
            eos_id=self.eos,
            suppress=self.suppress,
        )
        s.seen[s.kv.rows, c0] |= active
        s.c0.copy_(torch.where(active, c0, s.c0))
        s.past_hidden.copy_(torch.where(active[:, None], hidden[:, 0], s.past_hidden))
        s.kv.lengths.add_(active.long())
        s.num_tokens.add_(active.long())
        is_eos = c0 == self.eos
        stop = active & (is_eos | (s.num_tokens >= s.budget))
        s.num_frames.copy_(torch.where(stop, s.num_tokens - 1, s.num_frames))
        s.hit_budget.copy_(torch.where(stop, ~is_eos, s.hit_budget))
        s.finished.logical_or_(stop)

    def _predict_codes(self, frame: torch.Tensor) -> torch.Tensor:
        """All G codes of every slot's frame: c0 and the predictor's residual codebooks."""
        s, talker = self.state, self.talker
        start = torch.cat((s.past_hidden[:, None], talker.embed_codec(s.c0[:, None])), dim=1)
        s.cp_kv.start = 0  # frame-local positions

        def choose(logits: torch.Tensor, codebook: int) -> torch.Tensor:
            return self._choose(logits, s.subtalker, s.seeds, frame, codebook)

        rest = talker.code_predictor.residual_codes(
            start, s.cp_kv, choose, self.predictor_step, self.predictor_first
        )
        return torch.cat((s.c0[:, None], rest), dim=1)  # [B, G]

    def _choose(self, logits, params, seeds, frames, codebook: int, **site) -> torch.Tensor:
        """choose_tokens with this engine's sampler and sync rule, marked as "sampling"."""
        return self._timed(
            "sampling",
            choose_tokens,
            logits=logits,
            params=params,
            seeds=seeds,
            frames=frames,
            codebook=codebook,
            allow_host_sync=self.tuning.allow_host_sync,
            sampler=self.tuning.sampler,
            **site,
        )

    def _timed(self, part: str, fn, *args, **kwargs):
        """fn(*args, **kwargs), inside the timer's `part` when a timer is set (engine.timer)."""
        if self.timer is None:
            return fn(*args, **kwargs)
        with self.timer.part(part):
            return fn(*args, **kwargs)


def _prompt_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """The module path's mask for padded prompts: bool [m, 1, L, L], causal, real keys only."""
    keys = torch.arange(width, device=lengths.device)
    real = keys[None, :] < lengths[:, None]  # [m, L]
    causal = keys[None, :] <= keys[:, None]  # [L, L]
    return (causal[None] & real[:, None, :])[:, None]
