"""The fast path: slot state on the device, one decode step as a pure function of it, slot prefill.

Be paranoid about adding lines to `decode_step`: it runs once per frame for every slot and is what a
CUDA graph captures. It must not call .item(), branch on tensor values or read host state; every
per-slot quantity (lengths, counters, sampling parameters, seeds) is a device tensor updated in
place. Finished and empty slots keep computing (masked no-ops) until the host loop refills them.
Knows token ids and tensors; no text, no files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from qtts.core.config import MIN_NEW_TOKENS, ModelConfig
from qtts.core.kv_cache import PredictorKVCache, TalkerKVCache
from qtts.core.packed_stack import PackedStack
from qtts.core.prompt import Prompt
from qtts.core.sampling import RowParams, choose_tokens


@dataclass
class SlotFill:
    """One prompt to run into a free slot."""

    slot: int
    prompt: Prompt
    budget: int  # max_new_tokens
    seed: int
    talker: RowParams  # one row
    subtalker: RowParams  # one row


class SlotState:
    """Everything one decode step reads and writes, for `slots` rows."""

    def __init__(
        self,
        config: ModelConfig,
        slots: int,
        max_len: int,
        max_frames: int,
        max_trailing: int,
        *,
        talker: RowParams,
        subtalker: RowParams,
        dtype: torch.dtype,
        device,
    ):
        t, cp = config.talker, config.code_predictor
        h, g, dev = t.hidden_size, t.num_code_groups, device

        def zeros(*shape, dt=torch.long):
            return torch.zeros(shape, dtype=dt, device=dev)

        self.slots, self.max_frames = slots, max_frames
        self.kv = TalkerKVCache(
            t.num_hidden_layers,
            slots,
            t.num_key_value_heads,
            max_len,
            t.head_dim,
            dtype=dtype,
            device=dev,
        )
        self.cp_kv = PredictorKVCache(
            cp.num_hidden_layers,
            slots,
            cp.num_key_value_heads,
            g,
            cp.head_dim,
            dtype=dtype,
            device=dev,
        )
        self.c0 = zeros(slots)  # last sampled codebook-0 token
        self.past_hidden = zeros(slots, h, dt=dtype)  # talker state that produced c0
        self.num_tokens = zeros(slots)  # c0 tokens sampled so far
        self.budget = zeros(slots)  # max_new_tokens per slot
        self.finished = torch.ones(slots, dtype=torch.bool, device=dev)  # empty slots are done
        self.hit_budget = zeros(slots, dt=torch.bool)
        self.num_frames = zeros(slots)  # valid once finished
        self.seeds = zeros(slots)
        self.seen = zeros(slots, t.vocab_size, dt=torch.bool)  # c0 ids sampled (penalty)
        self.codes = zeros(slots, max_frames, g)  # [B, F, G] the output buffer
        self.trailing = zeros(slots, max_trailing, h, dt=dtype)  # [B, Tt, H]
        self.trailing_len = zeros(slots)
        # Per-slot sampling parameters, started from the job's templates (their host hints hold
        # for every slot: prefill refuses parameters whose hints differ).
        self.talker = _expand(talker, slots)
        self.subtalker = _expand(subtalker, slots)


class Engine:
    def __init__(
        self,
        model,
        config: ModelConfig,
        state: SlotState,
        tts_pad: torch.Tensor,
        *,
        packed: bool | None = None,
    ):
        self.talker, self.config, self.state = model.talker, config, state
        self.tts_pad = tts_pad  # [H]
        # The predictor's one-token steps through packed weights (qtts.core.packed_stack): the
        # default on CPU, where op dispatch dominates its 75 small layer passes per frame. The
        # packed copy is small (5 predictor layers); the talker, most of the weights, is not
        # duplicated. The GPU replays the module path inside a CUDA graph.
        if packed is None:
            packed = tts_pad.device.type == "cpu"
        cp = self.talker.code_predictor.model
        self.predictor_step = PackedStack(cp) if packed else cp
        t = config.talker
        self.eos = t.codec_eos_token_id
        dev = tts_pad.device
        self.suppress = torch.zeros(t.vocab_size, dtype=torch.bool, device=dev)  # [V]
        self.suppress[t.suppress_start :] = True
        self.suppress[self.eos] = False
        self.cp_positions = torch.arange(t.num_code_groups, device=dev)  # frame-local positions

    # -- prefill (eager, outside any graph) ---------------------------------------------------
    @torch.no_grad()
    def prefill(self, fills: list[SlotFill]) -> None:
        """Run prompts into their slots and sample each one's first c0.

        One fill runs unpadded: exactly the official single-request computation (what the CPU path
        uses, for bitwise parity). Several run as one right-padded, masked batch: one pass instead
        of one per slot (what the GPU path uses; padded query rows still see real keys, no NaN)."""
        s, dev = self.state, self.state.c0.device
        for f in fills:
            if f.prompt.trailing.shape[0] > s.trailing.shape[1]:
                raise ValueError("trailing text longer than the engine's buffer")
            for dst, src in ((s.talker, f.talker), (s.subtalker, f.subtalker)):
                if _hints(src) != _hints(dst):
                    raise ValueError("a job's sampling hints differ from the engine's")
        m = len(fills)
        slots = torch.tensor([f.slot for f in fills], device=dev)  # [m]
        lengths = torch.tensor([f.prompt.embeds.shape[0] for f in fills], device=dev)  # [m]
        width = int(max(f.prompt.embeds.shape[0] for f in fills))
        x, mask = _padded(fills, width) if m > 1 else (fills[0].prompt.embeds[None], None)
        pos = torch.arange(width, device=dev).expand(m, width)  # [m, L]
        hidden = self.talker.model(x, pos, mask, s.kv.prefill_writer(slots))  # [m, L, H]
        rows = torch.arange(m, device=dev)
        logits = self.talker.codec_head(hidden)[rows, lengths - 1].float()  # [m, V]
        for f in fills:
            for dst, src in ((s.talker, f.talker), (s.subtalker, f.subtalker)):
                for name in _TENSORS:
                    getattr(dst, name)[f.slot] = getattr(src, name)[0]
        budgets = torch.tensor([f.budget for f in fills], device=dev)
        s.seeds[slots] = torch.tensor([f.seed for f in fills], device=dev)
        s.seen[slots] = False
        first = torch.ones_like(slots, dtype=torch.bool)  # token 0: EOS is blocked
        c0 = choose_tokens(logits, _rows(s.talker, slots), s.seeds[slots], torch.zeros_like(slots),
                           0, seen=s.seen[slots], block_eos=first, eos_id=self.eos,
                           suppress=self.suppress)  # fmt: skip
        s.seen[slots, c0] = True
        s.c0[slots], s.past_hidden[slots] = c0, hidden[rows, lengths - 1]
        s.kv.lengths[slots], s.num_tokens[slots], s.budget[slots] = lengths, 1, budgets
        for f in fills:
            s.trailing[f.slot, : f.prompt.trailing.shape[0]] = f.prompt.trailing
            s.trailing_len[f.slot] = f.prompt.trailing.shape[0]
        done = budgets <= 1  # no talker step left: zero frames
        s.finished[slots], s.hit_budget[slots], s.num_frames[slots] = done, done, 0

    # -- one decode step (graph-capturable) -----------------------------------------------------
    @torch.no_grad()
    def decode_step(self, view_len: int) -> None:
        s, talker = self.state, self.talker
        active = ~s.finished  # [B]
        frame = s.num_tokens - 1  # the frame whose residual codes we predict now
        codes = self._predict_codes(frame)  # [B, G]
        s.codes[s.kv.rows, frame.clamp(0, s.max_frames - 1)] = codes
        has_text = frame < s.trailing_len
        text = s.trailing[s.kv.rows, frame.clamp(0, s.trailing.shape[1] - 1)]  # [B, H]
        x = talker.embed_frame(codes) + torch.where(has_text[:, None], text, self.tts_pad)
        mask = s.kv.decode_mask(view_len)  # [B, 1, 1, S]
        pos = s.kv.lengths[:, None]  # [B, 1]
        hidden = talker.model(x[:, None], pos, mask, s.kv.decode_view(view_len))  # [B, 1, H]
        logits = talker.codec_head(hidden)[:, 0].float()  # [B, V]
        c0 = choose_tokens(
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
        """Codebooks 1..G-1 for every slot: 2-token prefill then one token per step, KV cached."""
        s, cp = self.state, self.talker.code_predictor
        x = torch.cat((s.past_hidden[:, None], self.talker.embed_codec(s.c0[:, None])), dim=1)
        b = x.shape[0]
        codes = [s.c0]
        s.cp_kv.start = 0
        for j in range(len(cp.lm_head)):
            n = x.shape[1]
            pos = self.cp_positions[s.cp_kv.start : s.cp_kv.start + n].expand(b, n)  # [B, n]
            stack = cp.model if n > 1 else self.predictor_step  # the 2-token start: module path
            hidden = stack(cp.small_to_mtp_projection(x), pos, None, s.cp_kv)  # [B, n, Hc]
            logits = cp.lm_head[j](hidden)[:, -1].float()  # [B, vocab]
            code = choose_tokens(logits, s.subtalker, s.seeds, frame, j + 1)
            codes.append(code)
            s.cp_kv.start += n
            x = cp.model.codec_embedding[j](code[:, None])  # [B, 1, Ht]
        return torch.stack(codes, dim=1)  # [B, G]


_TENSORS = ("greedy", "temperature", "top_k", "top_p", "penalty")


def _hints(p: RowParams) -> tuple:
    return p.all_greedy, p.max_top_k, p.top_p_off


def _expand(template: RowParams, n: int) -> RowParams:
    """A 1-row template repeated for n slots (own storage, written per slot later)."""
    return dataclasses.replace(
        template, **{f: getattr(template, f).expand(n).clone() for f in _TENSORS}
    )


def _rows(params: RowParams, index: torch.Tensor) -> RowParams:
    """The rows `index` of params (copies), hints kept."""
    return dataclasses.replace(params, **{f: getattr(params, f)[index] for f in _TENSORS})


def _padded(fills: list[SlotFill], width: int):
    """Right-padded prompts [m, L, H] and their mask bool [m, 1, L, L] (causal, real keys only)."""
    first = fills[0].prompt.embeds
    x = first.new_zeros(len(fills), width, first.shape[1])
    lengths = torch.tensor([f.prompt.embeds.shape[0] for f in fills], device=first.device)
    for i, f in enumerate(fills):
        x[i, : f.prompt.embeds.shape[0]] = f.prompt.embeds
    keys = torch.arange(width, device=first.device)
    real = keys[None, :] < lengths[:, None]  # [m, L]
    causal = keys[None, :] <= keys[:, None]  # [L, L]
    return x, (causal[None] & real[:, None, :])[:, None]
