"""q/k/v and gate/up as one weight each, for the fused layer path's two matmuls per layer.

Done once, when the weights are on their device and in their dtype: each layer's concatenated
weight is kept on its module (`qkv_weight`, `gate_up_weight`, plain attributes, not in the state
dict) and the separate projections' parameters become views of its rows, so no weight is held
twice and the module path still computes with the same numbers. Fusing again is a no-op while
the views still share the fused storage; after a move or a cast (which breaks the views) it fuses
anew.
"""

from __future__ import annotations

import torch
from torch import nn

# fused weight's name -> the projections it concatenates, in row order
FUSED = {"qkv_weight": ("q_proj", "k_proj", "v_proj"), "gate_up_weight": ("gate_proj", "up_proj")}


def fuse_projections(stack: nn.Module) -> None:
    """Fuse every layer of a decoder stack (core/model/talker.py DecoderStack) in place."""
    for layer in stack.layers:
        _fuse(layer.self_attn, "qkv_weight")
        _fuse(layer.mlp, "gate_up_weight")


def fused_weight(module: nn.Module, name: str) -> torch.Tensor:
    """The fused weight `name` of an attention or MLP module; refuses an unfused or stale one."""
    fused = getattr(module, name, None)
    if fused is None or not _views(fused, _parts(module, name)):
        raise RuntimeError(f"{type(module).__name__}.{name}: call fuse_projections first")
    return fused


def _parts(module: nn.Module, name: str) -> tuple[nn.Linear, ...]:
    return tuple(getattr(module, part) for part in FUSED[name])


def _views(fused: torch.Tensor, linears: tuple[nn.Linear, ...]) -> bool:
    """Every projection's weight is still a view of `fused`: same storage, dtype and device (meta
    storages all report address 0, so the address alone cannot tell), and the rows add up."""
    base = fused.untyped_storage().data_ptr()
    return sum(m.weight.shape[0] for m in linears) == fused.shape[0] and all(
        m.weight.untyped_storage().data_ptr() == base
        and (m.weight.dtype, m.weight.device) == (fused.dtype, fused.device)
        for m in linears
    )


def _fuse(owner: nn.Module, name: str) -> None:
    linears = _parts(owner, name)
    known = getattr(owner, name, None)
    if known is not None and _views(known, linears):
        return
    fused = torch.cat([m.weight.detach() for m in linears])  # [sum(out), in]
    start = 0
    for m in linears:
        rows = m.weight.shape[0]
        m.weight = nn.Parameter(fused[start : start + rows], requires_grad=False)
        start += rows
    object.__setattr__(owner, name, fused)  # a plain attribute: not a parameter, not saved
