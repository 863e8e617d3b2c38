"""A refill's host-side inputs, packed for one copy: per-slot scalars and scatter indices.

Refilling m freed slots writes five small per-slot fields (slot, prompt length, budget, seed,
trailing length) and scatters m prompts into a padded batch and m trailing-text blocks into the
slots. Built on the host as one int64 table and copied once without blocking (engine.host_copy),
each field is then written for all m slots by one indexed write, whatever m is. Sampling
parameters are not per refill: they are the engine's, set once (engine.slots.SlotState). Knows
fills and tensors; no model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from qtts.core.engine.step.host_copy import to_device

_SCALARS = ("slot", "length", "budget", "seed", "trailing_len")


@dataclass
class RefillTable:
    """Device views of one refill: int64 [m] per scalar field, and the (row, position) pairs
    that scatter prompts and trailing rows."""

    slot: torch.Tensor
    length: torch.Tensor
    budget: torch.Tensor
    seed: torch.Tensor
    trailing_len: torch.Tensor
    prompt_row: torch.Tensor  # [sum L]: row of the padded batch each prompt position goes to
    prompt_pos: torch.Tensor  # [sum L]
    trailing_slot: torch.Tensor  # [sum Tt]: slot each trailing-text row goes to
    trailing_pos: torch.Tensor  # [sum Tt]


def pack_refill(fills, device: torch.device | str) -> RefillTable:
    """fills: SlotFill-like (slot, prompt, budget, seed) -> device views."""
    m = len(fills)
    # Columns padded to 16 bytes: the first token's sampler (the Triton kernel on a GPU) reads the
    # seed column in place.
    width = m + (m & 1)
    lengths = np.array([f.prompt.embeds.shape[0] for f in fills], dtype=np.int64)
    trailing = np.array([f.prompt.trailing.shape[0] for f in fills], dtype=np.int64)
    slots = np.array([f.slot for f in fills], dtype=np.int64)
    columns = [slots, lengths, [f.budget for f in fills], [f.seed for f in fills], trailing]
    header = np.zeros((len(columns), width), dtype=np.int64)
    for row, column in zip(header, columns, strict=True):
        row[:m] = column
    indices = [
        np.repeat(np.arange(m), lengths),
        np.concatenate([np.arange(n) for n in lengths]),
        np.repeat(slots, trailing),
        np.concatenate([np.arange(n) for n in trailing]),
    ]
    table = to_device(np.concatenate([header.reshape(-1), *indices]), device)  # the one copy
    views = [c[:m] for c in table[: header.size].view(len(columns), width).unbind(0)]
    sizes = [int(lengths.sum())] * 2 + [int(trailing.sum())] * 2
    rest = torch.split(table[header.size :], sizes)
    return RefillTable(
        **dict(zip(_SCALARS, views, strict=True)),
        prompt_row=rest[0],
        prompt_pos=rest[1],
        trailing_slot=rest[2],
        trailing_pos=rest[3],
    )
