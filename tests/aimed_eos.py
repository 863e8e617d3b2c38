"""A tiny checkpoint whose EOS is aimed so that sampled rows stop under some seeds and run to their
frame budget under others: what the --on-budget retry tests need (a random checkpoint's EOS
either never wins or always does).

The aim: the EOS row of codec_head points along the talker's mean hidden state (seen while a row
runs away), scaled so that EOS's logit there is EOS_AIM. The audio codes' top logit is about 7 on
the tiny checkpoint of seed 3, so EOS is near the top: a sampled step picks it now and then, and
about half the tries of a short row stop within a budget of 10 steps, the rest run to it.
"""

from __future__ import annotations

from pathlib import Path

import torch

EOS_AIM = 7.0


def aim_eos(synth, text_model, requests, options) -> torch.Tensor:
    """Aims the EOS row of the loaded synthesizer's codec_head from a run of `requests` (unaimed:
    they run away) and returns the row [H]."""
    head = synth.model.talker.codec_head
    hidden = []  # the talker's hidden states [positions, H] at every call, while it runs away
    hook = head.register_forward_hook(
        lambda m, args, out: hidden.append(args[0].reshape(-1, args[0].shape[-1]))
    )
    try:
        list(synth.synthesize(requests, options))
    finally:
        hook.remove()
    mean = torch.cat(hidden).mean(0)  # [H]
    row = EOS_AIM * mean / mean.dot(mean)
    with torch.no_grad():
        head.weight[text_model.config.talker.codec_eos_token_id] = row
    return row


def store_eos_row(checkpoint: Path, text_model, row: torch.Tensor) -> None:
    """Writes the aimed row into the checkpoint's model.safetensors, so that a job loading it from
    disk runs the aimed model."""
    from safetensors.torch import load_file, save_file

    path = Path(checkpoint) / "model.safetensors"
    tensors = load_file(path)
    weight = tensors["talker.codec_head.weight"]
    weight[text_model.config.talker.codec_eos_token_id] = row.to(weight.dtype)
    save_file(tensors, path, metadata={"format": "pt"})
