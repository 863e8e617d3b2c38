"""Bytes a job holds on its device, by component, from the model's dimensions: arithmetic only.

Exact where the engine allocates by shape (KV caches, slot state); upper bounds where the bytes are
transient (a decode step's activations, a prefill pass, a vocoder chunk), each stated against what
tests/unit/engine/test_footprint.py measures with a live-bytes tracker on CPU and meta tensors.
The planner (qtts.core.engine.plan.planner) adds these up. Knows shapes and dtypes; no tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

from qtts.core.engine.step.prefill_attention import BIAS_ALIGN
from qtts.core.engine.step.token_choice import ROW_DTYPES
from qtts.core.engine.vocoder.vocoder_windows import LEFT_CONTEXT, bucket_frames
from qtts.core.model.codec import SpeechDecoderConfig
from qtts.core.model.config import ModelConfig

INT64, BOOL, FP32 = 8, 1, 4
# The torch sampler's full-vocabulary draw keeps int64 temporaries of [B, V] alive (the noise
# hash) plus float copies of the logits: measured 49 bytes per vocab id per slot; 64 bounds it with
# what else is alive at that moment (the logits, the step's small state).
SAMPLER_BYTES_PER_ID = 64
# The Triton sampler (CUDA) allocates nothing: what is alive is the head's output and its fp32
# copy, 2 + 4 bytes per id per slot in bf16; 8 bounds it.
KERNEL_SAMPLER_BYTES_PER_ID = 8
# A vocoder chunk's live activations peak in the last decoder block, at about four times its
# [channels, samples] output (SnakeBeta temporaries, the residual input, conv outputs): measured
# 4.1x at the real dimensions; 5x bounds it.
VOCODER_LIVE_FACTOR = 5
# A refill's per-row int64 values on the device: the 5 fields of its table (engine.refill), the
# trailing-text indices and the pass's own index vectors; 32 bounds them (23 per row measured
# when the table also held 10 sampling columns).
REFILL_INT64_PER_ROW = 32


@dataclass(frozen=True)
class Dims:
    """The shapes byte counts depend on, and the dtype sizes the job runs in."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    groups: int  # codebooks per frame
    cp_layers: int
    cp_kv_heads: int
    cp_head_dim: int
    cp_vocab: int
    act_bytes: int  # bytes per element of weights and activations (2 for bf16, 4 for fp32)
    decoder_stage_elems: int  # largest [channels x samples] of one vocoder chunk, per utterance
    decoder_bytes: int  # element size the speech decoder runs in
    samples_per_frame: int
    chunk_frames: int  # frames one vocoder chunk decodes (chunk + left context)

    @classmethod
    def of(
        cls,
        config: ModelConfig,
        decoder: SpeechDecoderConfig,
        act_bytes: int,
        decoder_bytes: int,
        chunk_frames: int = 300 + 25,
    ) -> Dims:
        t, cp = config.talker, config.code_predictor
        samples = chunk_frames
        for r in decoder.upsampling_ratios:
            samples *= r
        stage = decoder.decoder_dim * samples  # the decoder's first conv
        channels = decoder.decoder_dim
        for r in decoder.upsample_rates:
            channels, samples = channels // 2, samples * r
            stage = max(stage, channels * samples)
        return cls(
            layers=t.num_hidden_layers,
            hidden=t.hidden_size,
            intermediate=t.intermediate_size,
            heads=t.num_attention_heads,
            kv_heads=t.num_key_value_heads,
            head_dim=t.head_dim,
            vocab=t.vocab_size,
            groups=t.num_code_groups,
            cp_layers=cp.num_hidden_layers,
            cp_kv_heads=cp.num_key_value_heads,
            cp_head_dim=cp.head_dim,
            cp_vocab=cp.vocab_size,
            act_bytes=act_bytes,
            decoder_stage_elems=stage,
            decoder_bytes=decoder_bytes,
            samples_per_frame=decoder.upsample,
            chunk_frames=chunk_frames,
        )

    def kv_bytes_per_position(self) -> int:
        """Talker K and V, every layer, one position of one slot (112 KiB for 0.6B/1.7B bf16)."""
        return self.layers * 2 * self.kv_heads * self.head_dim * self.act_bytes


def slot_state_bytes(d: Dims, slots: int, kv_len: int, max_frames: int, max_trailing: int) -> int:
    """Everything SlotState allocates (qtts.core.engine.step.slots), exactly."""
    talker_kv = slots * kv_len * d.kv_bytes_per_position()
    predictor_kv = d.cp_layers * 2 * slots * d.cp_kv_heads * d.groups * d.cp_head_dim * d.act_bytes
    per_slot = (
        d.hidden * d.act_bytes  # past_hidden
        + d.vocab * BOOL  # seen
        + max_frames * d.groups * INT64  # codes
        + max_trailing * d.hidden * d.act_bytes  # trailing text rows
        + 8 * INT64  # lengths, rows, c0, num_tokens, budget, num_frames, seeds, trailing_len
        + 2 * BOOL  # finished, hit_budget
        + 2 * sum(dtype.itemsize for dtype in ROW_DTYPES.values())  # both sites' RowParams
    )
    return talker_kv + predictor_kv + slots * per_slot


def step_activation_bytes(
    d: Dims, slots: int, view: int, repeats_kv: bool, kernel_sampler: bool = False
) -> int:
    """Upper bound of the transient bytes one decode step holds at once (what a captured graph's
    pool keeps): the largest of its phases, which are never alive together: a layer's working
    set during the forward, the sampler's after it, and the next input's embedding (the frame's
    G code embeddings and their stacked copy, with the step's few [H] rows). repeats_kv: the
    attention repeats the K/V view for every query head (the CPU path), copying 2 x [heads,
    view, head_dim] per slot; grouped attention through a fused kernel reads the view in place
    (only the mask is new).
    kernel_sampler: sampling by the Triton kernel (CUDA), not the torch twin."""
    per_id = KERNEL_SAMPLER_BYTES_PER_ID if kernel_sampler else SAMPLER_BYTES_PER_ID
    sampler = per_id * max(d.vocab, d.cp_vocab)
    layer = (3 * d.intermediate + 6 * d.hidden) * d.act_bytes + view * BOOL  # + the mask
    if repeats_kv:
        layer += 2 * d.heads * d.head_dim * view * d.act_bytes
    embed = (2 * d.groups + 4) * d.hidden * d.act_bytes
    return slots * max(sampler, layer, embed)


def prefill_activation_bytes(
    d: Dims, rows: int, width: int, fused: bool, kernel_sampler: bool = False
) -> int:
    """Upper bound of one padded prefill pass of `rows` prompts of `width` positions: the padded
    input (and the refill's indices that scatter it), held throughout, plus the larger of the
    layers' working set and the first token's draw after them (the last positions' hidden
    states and logits, in the model dtype and in fp32, and the sampler's; kernel_sampler as in
    step_activation_bytes).

    fused (the fused layer path, engine.fused_stack): the residual stream and the attention bias
    (engine.prefill_attention: one [L, L] block per query head sharing a KV head, its rows
    padded to BIAS_ALIGN keys), and the larger of a layer's two halves: the q/k/v projection
    with the q, k, v it becomes, or q, k, v with SDPA's output and its copy in head order; the
    gate/up product with silu_mul's output. Otherwise (the module path): layer activations per
    position, the K/V repeated for every query head and the bool mask [m, 1, L, L]. Both assume
    a fused attention kernel (CUDA's memory-efficient SDPA), so no [L, L] scores."""
    positions = rows * width
    per_id = KERNEL_SAMPLER_BYTES_PER_ID if kernel_sampler else SAMPLER_BYTES_PER_ID
    draw = rows * (2 * d.hidden * d.act_bytes + d.vocab * (d.act_bytes + FP32 + per_id))
    if fused:
        q, kv = d.heads * d.head_dim, d.kv_heads * d.head_dim
        attention = max(2 * q + 4 * kv, 3 * q + 2 * kv)  # proj. + q, k, v | q, k, v + out, copy
        per_position = (d.hidden + max(attention, 3 * d.intermediate)) * d.act_bytes
        keys = -(-width // BIAS_ALIGN) * BIAS_ALIGN
        bias = rows * (d.heads // d.kv_heads) * width * keys * d.act_bytes
        layers = positions * per_position + bias
    else:
        per_position = (3 * d.intermediate + 5 * d.hidden + 2 * d.heads * d.head_dim) * d.act_bytes
        layers = positions * (per_position + width * BOOL)
    held = positions * (d.hidden * d.act_bytes + 2 * INT64)  # + its scatter indices (refill)
    held += (rows * REFILL_INT64_PER_ROW + width) * INT64  # + the pass's positions 0..L-1
    return held + max(layers, draw)


CODES_BYTES_PER_FRAME = 16 * 8  # a frame's 16 codebook codes, int64


def vocoder_bytes(d: Dims, utterances: int, max_frames: int, graphs: bool = False) -> int:
    """Upper bound of one decode_bucketed call (qtts.core.engine.vocoder.vocoder_windows) on
    `utterances` rows of up to max_frames: one window's activations per row (a window is at most
    chunk_frames long, and no longer than the row rounded up to its frame bucket), plus the whole
    fp32 audio buffer. graphs (qtts.core.engine.vocoder.vocoder_graphs): the graphs' pool, sized by
    the largest window (captured first: a full window per row), beside the eager allocator's (a new
    shape runs eagerly once before its capture), plus the static codes and audio of a full
    window per row."""
    frames = bucket_frames(min(max_frames, d.chunk_frames), d.chunk_frames - LEFT_CONTEXT)
    stage = d.decoder_stage_elems * frames // d.chunk_frames
    window = VOCODER_LIVE_FACTOR * stage * d.decoder_bytes
    audio = max_frames * d.samples_per_frame * FP32
    pool = VOCODER_LIVE_FACTOR * d.decoder_stage_elems * d.decoder_bytes
    static = d.chunk_frames * (d.samples_per_frame * d.decoder_bytes + CODES_BYTES_PER_FRAME)
    return utterances * (window + audio + (pool + static if graphs else 0))
