"""Random talker weights whose EOS fires after a number of frames set by the text: about RATE
frames per text position of the prompt, greedy or sampled, at every size.

Owns the construction below and its constants. A random checkpoint's EOS never wins, so every row
runs to its frame budget; this edit of the drawn talker tensors (core/tiny/checkpoint.py draws
them) gives rows that end by EOS with lengths that grow with the text, for tests and benches of
the paths that see real lengths. Must not know: prompts, tokenizers or generation beyond the
model facts of docs/model.md (every position's input carries exactly one text term P(id); audio
codes are codec ids below `suppress_start`; RMSNorm, per-head q/k norms, causal attention).

How it works. Four residual dims of the talker are reserved, and zeroed in every embedding and in
every weight that reads or writes them except the paths designed here:

- k: a constant K at every position, from the bias of the text projection's last layer (every
  position's input passes through P exactly once). K is STREAM_SCALE times the norm of the rest
  of an input vector, so layer 0's input RMSNorm divides every position by nearly the same
  K / sqrt(H): the counts below are not weighted by each position's own norm.
- m: MARKER at generated positions (codec rows of the audio codes; special codec rows, the
  code predictor's embeddings and text rows hold 0 there).
- u: MARKER at text positions: positions whose text term is an ordinary text id (not im_start,
  im_end or the tts pad/bos/eos markers). A reserved text-embedding dim and one text-projection
  unit carry it through P, so the text projection's other units never see it.
- r: the readout.

Layer 0's head 0 has q = 0: with per-head q/k norms every score is 0, so causal attention is
uniform over positions 0..p. Its value reads (m - RATE u) and k, and its output is
((G - RATE U) / (p + 1), about sqrt(H)): G generated and U text positions so far. o_proj writes the
first into r (scaled to the stream's typical RMS at the final norm, so r stays one ordinary dim)
and cancels K in k with the second (layer 0's MLP and the layers above see the usual stream). The
EOS row of codec_head reads r alone with gain EOS_GAIN: its logit is about EOS_GAIN (G - RATE U) /
(p + 1): 0 at G = RATE U, where the audio codes' top logit (~5-10) still wins by ~6, then EOS_GAIN
/ (p + 1) more per frame, so EOS wins the next frame (a few frames later past ~500 positions, where
that step falls under the audio logits), greedy and sampled alike. A row gets RATE U + 1 frames:
- CustomVoice, VoiceDesign (non-streaming layout): U is the text's tokens plus the role's two
  ("assistant", newline), plus an instruction's ordinary tokens.
- Voice clone from the x-vector (streaming layout): the text trails one token per frame, so G - U
  stays -3 until it is all in (RATE must be at least 1), then the row ends as above.
- In-context cloning: the reference's frames count in G and its text in U, so the row is shorter
  by the reference's frames minus its text tokens (at least the 2 frames before EOS may win).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from qtts.core.model.config import TalkerConfig

RATE = 1.0  # frames per text position (tiny tokenizer: ~1.3 characters a token, speech ~0.83/char)
STREAM_SCALE = 16.0  # K over the largest input norm: layer 0's norms differ by < 1 / (2 * 16^2)
MARKER = 1.0  # m and u at the positions they mark
# EOS logit per unit of (G - RATE U) / (p + 1). Its largest |logit| seen: ~10,000 (tiny preset,
# at prompt positions, whose stream RMS is small), inside fp16's 65,504.
EOS_GAIN = 4000.0
CALIBRATION_FRAMES = 64  # synthetic generated positions that measure the final norm's input RMS
RESERVED = 4  # talker dims k, m, u, r: the last four
_TALKER = "talker.model."
_READERS = (  # each layer's weights that read the residual stream: [out, H]
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
)
_WRITERS = ("self_attn.o_proj", "mlp.down_proj")  # and write it: [H, in]


class Reserved(NamedTuple):
    """The talker's reserved residual dims (see the module docstring)."""

    k: int  # the constant K
    m: int  # generated positions
    u: int  # text positions
    r: int  # the readout EOS reads

    @classmethod
    def of(cls, hidden: int) -> Reserved:
        return cls(*range(hidden - RESERVED, hidden))


@torch.no_grad()
def stop_by_text(model: nn.Module, tensors: dict[str, torch.Tensor], rate: float = RATE) -> None:
    """Edit the drawn fp32 `tensors` (every name of `model.state_dict()`) in place so that a row
    ends by EOS after ~`rate` frames per text position. `model` is the built Qwen3TTS; it is
    loaded with `tensors` (assigned, not copied) to measure the final norm's input."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, not {rate}")
    config = model.config
    t = config.talker
    hidden = t.hidden_size
    if hidden <= RESERVED or t.text_hidden_size < 2:
        raise ValueError(
            f"stop_by_text needs a talker hidden size > {RESERVED} and a text hidden size > 1, "
            f"not {hidden} and {t.text_hidden_size}"
        )
    dims = Reserved.of(hidden)
    _clear_reserved(tensors, t.num_hidden_layers, list(dims))
    special_text = [
        config.im_start_token_id,
        config.im_end_token_id,
        config.tts_pad_token_id,
        config.tts_bos_token_id,
        config.tts_eos_token_id,
    ]
    _mark_text(tensors, special_text, dims.u)
    tensors[_TALKER + "codec_embedding.weight"][: t.suppress_start, dims.m] = MARKER
    big = STREAM_SCALE * _largest_input_norm(tensors, t.suppress_start)
    tensors["talker.text_projection.linear_fc2.bias"][dims.k] = big
    _counting_head(tensors, t, dims, big, rate)
    tensors["talker.model.norm.weight"][dims.r] = 1.0
    model.load_state_dict(tensors, assign=True)
    stream_rms = _final_norm_input_rms(model)  # r written with gain 0 so far
    tensors[_TALKER + "layers.0.self_attn.o_proj.weight"][dims.r, 0] = stream_rms
    head = tensors["talker.codec_head.weight"]  # [V, H]
    head[t.codec_eos_token_id] = 0.0
    head[t.codec_eos_token_id, dims.r] = EOS_GAIN


def _clear_reserved(tensors: dict[str, torch.Tensor], layers: int, dims: list[int]) -> None:
    """Zero the reserved dims in every talker embedding and every weight reading or writing them,
    so the random weights add nothing there; the designed paths are set afterwards."""
    tensors[_TALKER + "codec_embedding.weight"][:, dims] = 0.0
    for name, value in tensors.items():
        if name.startswith("talker.code_predictor.model.codec_embedding."):
            value[:, dims] = 0.0  # talker width: the talker sums them into its next input
    fc2 = "talker.text_projection.linear_fc2."
    tensors[fc2 + "weight"][dims] = 0.0
    tensors[fc2 + "bias"][dims] = 0.0
    for i in range(layers):
        layer = f"{_TALKER}layers.{i}."
        for reader in _READERS:
            tensors[f"{layer}{reader}.weight"][:, dims] = 0.0
        for writer in _WRITERS:
            tensors[f"{layer}{writer}.weight"][dims] = 0.0
    tensors["talker.codec_head.weight"][:, dims] = 0.0
    if "speaker_encoder.fc.weight" in tensors:  # Base: the x-vector fills the speaker position
        tensors["speaker_encoder.fc.weight"][dims] = 0.0
        tensors["speaker_encoder.fc.bias"][dims] = 0.0


def _mark_text(tensors: dict[str, torch.Tensor], special_ids: list[int], u: int) -> None:
    """MARKER in dim u of P(id) for every ordinary text id, 0 for the special ids: the last
    text-embedding dim and the last fc1 unit carry it alone (SiLU of a fixed input is a fixed
    value); fc2 scales it back to MARKER."""
    embedding = tensors[_TALKER + "text_embedding.weight"]  # [V, Ht]
    fc1_w = tensors["talker.text_projection.linear_fc1.weight"]  # [Ht, Ht]
    fc1_b = tensors["talker.text_projection.linear_fc1.bias"]  # [Ht]
    fc2_w = tensors["talker.text_projection.linear_fc2.weight"]  # [H, Ht]
    dim = unit = embedding.shape[1] - 1
    embedding[:, dim] = 1.0
    embedding[special_ids, dim] = 0.0
    fc1_w[:, dim] = 0.0  # no other unit reads the marker
    fc1_w[unit] = 0.0
    fc1_w[unit, dim] = 1.0
    fc1_b[unit] = 0.0
    fc2_w[:, unit] = 0.0  # no other output reads the unit
    fc2_w[u, unit] = MARKER / float(nn.functional.silu(torch.tensor(1.0)))


def _largest_input_norm(tensors: dict[str, torch.Tensor], audio_codes: int) -> float:
    """An upper estimate of an input vector's norm outside k: a frame's 16 code embeddings (each
    table's largest audio row) plus the largest P(id) with the bias of k still 0."""
    tables = [tensors[_TALKER + "codec_embedding.weight"][:audio_codes]]
    tables += [
        v
        for n, v in tensors.items()
        if n.startswith("talker.code_predictor.model.codec_embedding.")
    ]
    frame = sum(float(table.norm(dim=1).max()) for table in tables)
    p = "talker.text_projection."
    text = tensors[_TALKER + "text_embedding.weight"]  # [V, Ht]
    hidden = nn.functional.silu(
        text @ tensors[p + "linear_fc1.weight"].T + tensors[p + "linear_fc1.bias"]
    )
    projected = (
        hidden @ tensors[p + "linear_fc2.weight"].T + tensors[p + "linear_fc2.bias"]
    )  # [V, H]
    return frame + float(projected.norm(dim=1).max())


def _counting_head(
    tensors: dict[str, torch.Tensor], t: TalkerConfig, dims: Reserved, big: float, rate: float
) -> None:
    """Layer 0, head 0: q = 0 (uniform causal attention); value 0 = (m - rate u) in units of
    MARKER, value 1 = k's normalised K; o_proj: value 1 cancels K in k, value 0 goes to r with gain
    0 until the caller sets it."""
    layer = _TALKER + "layers.0."
    d = t.head_dim
    group = t.num_attention_heads // t.num_key_value_heads  # query heads per kv head
    k, m, u = dims.k, dims.m, dims.u
    tensors[layer + "input_layernorm.weight"][[k, m, u]] = 1.0
    tensors[layer + "self_attn.q_proj.weight"][:d] = 0.0  # head 0: every score 0
    v = tensors[layer + "self_attn.v_proj.weight"]  # [Hk * D, H]
    unit = big / (MARKER * math.sqrt(t.hidden_size))  # 1 / (a marker after the norm)
    v[0] = 0.0
    v[0, m], v[0, u] = unit, -rate * unit
    v[1] = 0.0
    v[1, k] = 1.0
    o = tensors[layer + "self_attn.o_proj.weight"]  # [H, heads * D]
    for head in range(group):  # kv head 0's query heads: values 0 and 1 go nowhere else
        o[:, head * d : head * d + 2] = 0.0
    o[:, :d] = 0.0  # head 0 writes only the designed paths
    o[k, 1] = -big / math.sqrt(t.hidden_size)


@torch.no_grad()
def _final_norm_input_rms(model: nn.Module) -> float:
    """The RMS of the talker's final-norm input over synthetic generated positions (random frames
    plus P(tts_pad)): the scale r is written at, so EOS's logit is ~EOS_GAIN per unit."""
    talker, config = model.talker, model.config
    gen = torch.Generator().manual_seed(0)  # its own: the checkpoint's draw is not disturbed
    groups = config.talker.num_code_groups
    codes = torch.randint(
        0, config.talker.suppress_start, (1, CALIBRATION_FRAMES, groups), generator=gen
    )
    pad = talker.embed_text(torch.tensor([[config.tts_pad_token_id]]))  # [1, 1, H]
    x = talker.embed_frame(codes) + pad  # [1, T, H]
    seen = []
    hook = talker.model.norm.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    try:
        talker.model(x, torch.arange(CALIBRATION_FRAMES)[None])
    finally:
        hook.remove()
    return float(seen[0].pow(2).mean(-1).sqrt().mean())
