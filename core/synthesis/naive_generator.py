"""The naive generator: simple, batched, and step-for-step the official decode loop.

The yardstick for the fast engine. It left-pads prompts like the official batch path, grows a plain
concatenating KV cache, keeps finished rows in the batch (feeding EOS) so every row sees the same
shapes as in the official call, and samples with the torch twin in core/engine/step/token_choice.py.
Knows token ids and tensors; no text, no files.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from qtts.core.engine.step.slots import Prompt
from qtts.core.engine.step.token_choice import RowParams, apply_penalties, select_tokens
from qtts.core.model.config import MIN_NEW_TOKENS, ModelConfig


class ConcatKV:
    """Dynamic KV cache: appends along the time axis, like the official DynamicCache."""

    def __init__(self, num_layers: int):
        self.k: list[torch.Tensor | None] = [None] * num_layers
        self.v: list[torch.Tensor | None] = [None] * num_layers

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        if self.k[layer] is not None:
            k = torch.cat((self.k[layer], k), dim=2)  # [B, Hk, S, D]
            v = torch.cat((self.v[layer], v), dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v


@dataclass
class GenerationInputs:
    prompts: list[Prompt]
    max_new_tokens: list[int]  # per row; a row that never stops yields max_new_tokens - 1 frames
    seeds: list[int]
    talker: RowParams  # per-row talker sampling
    subtalker: RowParams  # per-row code-predictor sampling


@dataclass
class GeneratedCodes:
    codes: torch.Tensor  # int64 [frames, G]
    hit_budget: bool  # no EOS before max_new_tokens


def _left_pad(prompts: list[Prompt]):
    lengths = torch.tensor([p.embeds.shape[0] for p in prompts])
    width = int(lengths.max())
    first = prompts[0].embeds
    x = first.new_zeros(len(prompts), width, first.shape[1])  # [B, L, H]
    keep = torch.zeros(len(prompts), width, dtype=torch.bool)  # [B, L]
    for i, p in enumerate(prompts):
        x[i, width - p.embeds.shape[0] :] = p.embeds
        keep[i, width - p.embeds.shape[0] :] = True
    return x, keep.to(first.device), lengths.to(first.device)


def _prefill_mask(keep: torch.Tensor) -> torch.Tensor | None:
    """bool [B, 1, L, L]: causal AND real key; a padded query sees itself so it never yields NaN."""
    if bool(keep.all()):
        return None  # no padding: SDPA's own causal path, as in the official code
    n = keep.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool, device=keep.device).tril()
    eye = torch.eye(n, dtype=torch.bool, device=keep.device)
    return ((causal[None] & keep[:, None, :]) | eye[None])[:, None]


class NaiveGenerator:
    def __init__(self, model, config: ModelConfig, tts_pad: torch.Tensor):
        self.talker = model.talker
        self.config = config
        self.tts_pad = tts_pad  # [H]
        t = config.talker
        self.eos = t.codec_eos_token_id
        suppress = torch.zeros(t.vocab_size, dtype=torch.bool, device=tts_pad.device)
        suppress[t.suppress_start :] = True
        suppress[self.eos] = False
        self.suppress = suppress  # [V]

    @torch.no_grad()
    def generate(self, inp: GenerationInputs) -> list[GeneratedCodes]:
        talker, dev = self.talker, self.tts_pad.device
        b = len(inp.prompts)
        budget = torch.tensor(inp.max_new_tokens, device=dev)
        seeds = torch.tensor(inp.seeds, dtype=torch.int64, device=dev)
        x, keep, lengths = _left_pad(inp.prompts)
        positions = (keep.long().cumsum(-1) - 1).masked_fill(~keep, 1)
        cache = ConcatKV(len(talker.model.layers))
        hidden = talker.model(x, positions, _prefill_mask(keep), cache)  # [B, L, H]
        logits = talker.codec_head(hidden)[:, -1].float()  # [B, V]
        past_hidden = hidden[:, -1:]  # [B, 1, H]

        seen = torch.zeros(b, logits.shape[-1], dtype=torch.bool, device=dev)
        c0 = self._pick_c0(logits, inp, seeds, seen, step=0)
        finished = c0 == self.eos
        num_frames = torch.full((b,), -1, dtype=torch.long, device=dev)
        num_frames[finished] = 0
        hit = torch.zeros(b, dtype=torch.bool, device=dev)
        frames: list[torch.Tensor] = []
        step = 1
        while step < int(budget.max()) and not bool(finished.all()):
            # Rows at their budget stop here: their last c0 never gets residual codes.
            at_budget = ~finished & (step >= budget)
            num_frames[at_budget], hit[at_budget] = step - 1, True
            finished = finished | at_budget
            if bool(finished.all()):
                break
            codes = self._predict_codes(past_hidden, c0, inp, seeds, frame=step - 1)  # [B, G]
            frames.append(codes)
            trailing = self._text_term(inp.prompts, step - 1)  # [B, H]
            emb = talker.embed_frame(codes) + trailing  # [B, H]
            keep = torch.cat((keep, torch.ones(b, 1, dtype=torch.bool, device=dev)), dim=1)
            mask = None if bool(keep.all()) else keep[:, None, None, :]  # [B, 1, 1, S]
            pos = (lengths + step - 1)[:, None]  # [B, 1]
            hidden = talker.model(emb[:, None], pos, mask, cache)  # [B, 1, H]
            logits = talker.codec_head(hidden)[:, -1].float()
            past_hidden = hidden
            nxt = self._pick_c0(logits, inp, seeds, seen, step=step)
            nxt = torch.where(finished, torch.full_like(nxt, self.eos), nxt)
            stopped = ~finished & (nxt == self.eos)
            num_frames[stopped] = step
            finished = finished | stopped
            c0 = nxt
            step += 1
        at_end = num_frames < 0  # ran until the global budget
        num_frames[at_end], hit[at_end] = step - 1, True
        groups = self.config.talker.num_code_groups
        stacked = torch.stack(frames, dim=1) if frames else c0.new_zeros(b, 0, groups)
        return [
            GeneratedCodes(stacked[i, : int(num_frames[i])].cpu(), bool(hit[i])) for i in range(b)
        ]

    def _pick_c0(self, logits, inp: GenerationInputs, seeds, seen, step: int) -> torch.Tensor:
        block = torch.full((logits.shape[0],), step < MIN_NEW_TOKENS, device=logits.device)
        scores = apply_penalties(
            logits,
            inp.talker.repetition_penalty,
            seen=seen,
            block_eos=block,
            eos_id=self.eos,
            suppress=self.suppress,
        )
        frames = torch.full_like(seeds, step)
        c0 = select_tokens(scores, inp.talker, seeds, frames, codebook=0)
        seen[torch.arange(len(c0), device=c0.device), c0] = True
        return c0

    def _predict_codes(self, past_hidden, c0, inp: GenerationInputs, seeds, frame: int):
        """All G codes of one frame: c0 and the predictor's residual codebooks (fresh cache)."""
        cp = self.talker.code_predictor
        start = torch.cat((past_hidden, self.talker.embed_codec(c0[:, None])), dim=1)  # [B, 2, H]
        frames = torch.full_like(seeds, frame)

        def choose(logits: torch.Tensor, codebook: int) -> torch.Tensor:
            return select_tokens(logits, inp.subtalker, seeds, frames, codebook)

        rest = cp.residual_codes(start, ConcatKV(len(cp.model.layers)), choose)
        return torch.cat((c0[:, None], rest), dim=1)  # [B, G]

    def _text_term(self, prompts: list[Prompt], step: int) -> torch.Tensor:
        rows = [p.trailing[step] if step < p.trailing.shape[0] else self.tts_pad for p in prompts]
        return torch.stack(rows)  # [B, H]
