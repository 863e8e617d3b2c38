"""What the engine holds per slot, and what a refill brings into one.

A Prompt is the engine's input for one request (prefill embeddings and trailing text rows, built
by qtts.core.synthesis.prompt); a SlotFill puts one into a free slot with its budget and seed;
SlotState is every per-slot tensor a decode step reads and writes, allocated once per engine pass
(the sampling parameters included: one set per engine, the same for every slot). Knows tensors and
token ids only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from qtts.core.engine.step.kv_cache import PredictorKVCache, TalkerKVCache
from qtts.core.engine.step.token_choice import RowParams
from qtts.core.model.config import ModelConfig, SamplingParams


@dataclass
class Prompt:
    embeds: torch.Tensor  # [L, H] prefill inputs
    trailing: torch.Tensor  # [Tt, H] text rows added to decode steps 0..Tt-1 (tts_pad after)


@dataclass
class SlotFill:
    """One prompt to run into a free slot."""

    slot: int
    prompt: Prompt
    budget: int  # max_new_tokens
    seed: int


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
        talker: SamplingParams,
        subtalker: SamplingParams,
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
        # The engine's sampling parameters, one row per slot because the sampler reads per-row
        # tensors; every row holds the same values, so the host hints hold for every slot.
        self.talker = RowParams.from_sampling(talker, slots, dev)
        self.subtalker = RowParams.from_sampling(subtalker, slots, dev)
