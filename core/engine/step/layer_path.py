"""The one place a layer path becomes the callables a decode step runs its stacks through.

`EngineTuning.layer_path` picks one of three implementations of the same layers: "module" (the
model's forward, the twin of the others), "packed" (the predictor's one-token steps through packed
weights, core/engine/step/packed_stack.py: the CPU default) and "fused" (both stacks through the
fused ops, core/engine/step/fused_stack.py: the GPU default). Each is tied to the module path by its
tests. The fused path also prefills through the fused ops; the others prefill through the model's
forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from qtts.core.engine.step.fused_stack import CUSTOM_OPS, TWIN_OPS, FusedStack
from qtts.core.engine.step.packed_stack import PackedStack
from qtts.core.model.fused_weights import fuse_projections


@dataclass(frozen=True)
class LayerSteps:
    talker: Callable  # (x [B, T, H], positions [B, T], mask, cache) -> hidden [B, T, H]
    predictor: Callable  # the same signature, for the code predictor's one-token steps
    predictor_first: Callable | None  # its 2-token first pass; None: the module
    # (x [m, L, H] padded, lengths [m], slot prefill writer) -> last positions' hidden [m, H];
    # None: the talker module's forward
    talker_prefill: Callable | None = None


def prepare_weights(model, layer_path: str) -> None:
    """The weight layout `layer_path` reads: q/k/v and gate/up fused for the fused path (once;
    a no-op when already fused), nothing otherwise. Done at load, with the weights in place."""
    if layer_path == "fused":
        fuse_projections(model.talker.model)
        fuse_projections(model.talker.code_predictor.model)


def layer_steps(
    model, layer_path: str, talker_positions: int, predictor_positions: int, custom_ops: bool = True
):
    """The steps for `layer_path` over `model` (core/model/talker.py). The fused path needs the
    projections fused (core/model/fused_weights.py): the synthesizer does it at load, after which
    this is a no-op; a model built elsewhere (bench, tests) is fused here, once. custom_ops: the
    fused stacks call the qtts custom ops, else their torch twins directly (a CPU)."""
    talker, predictor = model.talker.model, model.talker.code_predictor.model
    if layer_path == "module":
        return LayerSteps(talker, predictor, None)
    if layer_path == "packed":
        return LayerSteps(talker, PackedStack(predictor), None)
    if layer_path == "fused":
        prepare_weights(model, layer_path)
        ops = CUSTOM_OPS if custom_ops else TWIN_OPS
        fused_predictor = FusedStack(predictor, predictor_positions, ops)
        fused_talker = FusedStack(talker, talker_positions, ops)
        return LayerSteps(fused_talker, fused_predictor, fused_predictor, fused_talker.prefill)
    raise ValueError(f"unknown layer path {layer_path!r}")
