"""A refill's host-side inputs, packed for one copy: per-slot scalars and scatter indices.

Refilling m freed slots writes ~15 small per-slot fields (slot, prompt length, budget, seed,
trailing length, both sites' sampling parameters) and scatters m prompts into a padded batch and
m trailing-text blocks into the slots. Built on the host as one int64 table (floats ride as their
float32 bits) and copied once without blocking (engine.host_copy), each field is then written for
all m slots by one indexed write, whatever m is. Knows fills and tensors; no model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from qtts.core.engine.host_copy import float32_bits, from_float32_bits, to_device
from qtts.core.model.config import SamplingParams

SITE_FIELDS = ("greedy", "top_k", "temperature", "top_p", "penalty")  # RowParams' tensors
_INT_FIELDS = ("slot", "length", "budget", "seed", "trailing_len")


def _site_values(p: SamplingParams) -> tuple:
    return (not p.do_sample, p.top_k, p.temperature, p.top_p, p.repetition_penalty)


@dataclass
class RefillTable:
    """Device views of one refill: int64 [m] per scalar field, sampling fields per site in
    RowParams' dtypes, and the (row, position) pairs that scatter prompts and trailing rows."""

    slot: torch.Tensor
    length: torch.Tensor
    budget: torch.Tensor
    seed: torch.Tensor
    trailing_len: torch.Tensor
    talker: dict[str, torch.Tensor]  # SITE_FIELDS -> [m]
    subtalker: dict[str, torch.Tensor]
    prompt_row: torch.Tensor  # [sum L]: row of the padded batch each prompt position goes to
    prompt_pos: torch.Tensor  # [sum L]
    trailing_slot: torch.Tensor  # [sum Tt]: slot each trailing-text row goes to
    trailing_pos: torch.Tensor  # [sum Tt]


def pack_refill(fills, device: torch.device | str) -> RefillTable:
    """fills: SlotFill-like (slot, prompt, budget, seed, talker, subtalker) -> device views."""
    m = len(fills)
    lengths = np.array([f.prompt.embeds.shape[0] for f in fills], dtype=np.int64)
    trailing = np.array([f.prompt.trailing.shape[0] for f in fills], dtype=np.int64)
    slots = np.array([f.slot for f in fills], dtype=np.int64)
    ints = np.stack([slots, lengths, [f.budget for f in fills], [f.seed for f in fills], trailing])
    sites = []
    for site in ("talker", "subtalker"):
        values = np.array([_site_values(getattr(f, site)) for f in fills], dtype=np.float64)
        sites += [values[:, 0].astype(np.int64), values[:, 1].astype(np.int64)]
        sites += [float32_bits(values[:, j]) for j in (2, 3, 4)]
    header = np.concatenate([ints.reshape(-1), np.concatenate(sites)])  # field-major, m each
    indices = [
        np.repeat(np.arange(m), lengths),
        np.concatenate([np.arange(n) for n in lengths]),
        np.repeat(slots, trailing),
        np.concatenate([np.arange(n) for n in trailing]),
    ]
    table = to_device(np.concatenate([header, *indices]), device)  # the one copy
    columns = list(table[: header.shape[0]].view(-1, m).unbind(0))  # views, no kernels
    sizes = [int(lengths.sum())] * 2 + [int(trailing.sum())] * 2
    rest = torch.split(table[header.shape[0] :], sizes)
    scalars = dict(zip(_INT_FIELDS, columns[: len(_INT_FIELDS)], strict=True))
    per_site = [columns[len(_INT_FIELDS) :][i * 5 : (i + 1) * 5] for i in range(2)]
    talker, subtalker = (_site_tensors(cols) for cols in per_site)
    return RefillTable(**scalars, talker=talker, subtalker=subtalker, prompt_row=rest[0],
                       prompt_pos=rest[1], trailing_slot=rest[2], trailing_pos=rest[3])  # fmt: skip


def _site_tensors(cols: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    greedy, top_k, temperature, top_p, penalty = cols
    return {
        "greedy": greedy.bool(),
        "top_k": top_k,
        "temperature": from_float32_bits(temperature),
        "top_p": from_float32_bits(top_p),
        "penalty": from_float32_bits(penalty),
    }
