"""The memory plan of a job: slots, KV length per length group, graph views, vocoder micro-batch.

`plan_memory` is a pure function of the device's byte budget, the model's dimensions
(qtts.core.engine.plan.footprint.Dims) and the rows' shapes. Rows are cut into length groups, each
with its own KV cache sized to its own longest row (a single long row no longer sizes the cache
of every slot), and each group gets as many slots as fit (auto) or the requested batch size.
The peak is the weights, plus the largest group's slot state, decode activations (the CUDA graph
pool on GPU) and prefill pass, plus the vocoder working beside decoding, plus a safety margin.
Knows shapes and bytes; no tensors, no model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from qtts.core.engine.device.tuning import EngineTuning, sampler_on
from qtts.core.engine.plan.footprint import (
    Dims,
    prefill_activation_bytes,
    slot_state_bytes,
    step_activation_bytes,
    vocoder_bytes,
)
from qtts.core.engine.step.views import aligned_kv_len, view_lengths
from qtts.core.engine.vocoder.vocoder_windows import bucket_shapes

GIB = 2**30
# A new length group starts where a row needs less than this share of the group's KV length, so
# no slot wastes more than a quarter of its cache, and a job has few groups (each group is an
# engine pass of its own: its graphs are captured again and its last rows drain its slots). A
# shorter group then rejoins the longer one before it where that costs no slots
# (`merge_groups`): its rows then sit in longer caches than they need, which costs memory the
# plan has to spare, not time (a step attends over the view of the longest row in the slots,
# and the rows run longest first), while a pass of its own costs a capture and a drain.
GROUP_KV_SHARE = 0.75
# Allocator rounding and fragmentation, cuBLAS/cuDNN workspaces, CUDA graph instantiation: held
# back from the budget.
MARGIN_SHARE, MIN_MARGIN = 0.08, 1 * GIB
# The vocoder gets at most a quarter of what the weights leave, and at most this many rows at once:
# on a GPU more rows share one read of its weights; a CPU's time per audio-second measured the
# same from 1 to 4 rows a call (its large blocks kept: core/engine/device/cpu_runtime.py), while
# each row adds its activations (hundreds of MB a window) to the heap a CPU job keeps.
VOCODER_SHARE = 0.25
VOCODER_MAX_BATCH = {"cuda": 16, "cpu": 2}
# Auto batch sizes stop here: past 256 rows a GPU step is compute-bound, and a 2-core CPU's
# matrix products reach their best rate well before 64 rows.
MAX_AUTO_SLOTS = {"cuda": 256, "cpu": 64}


@dataclass(frozen=True)
class RowShape:
    prompt: int  # prefill positions
    budget: int  # max_new_tokens
    trailing: int  # trailing text rows

    @property
    def kv_need(self) -> int:
        # positions a slot may write (qtts.core.engine.loop.engine)
        return self.prompt + self.budget


@dataclass(frozen=True)
class GroupPlan:
    rows: tuple[int, ...]  # indices into the planned rows, longest KV need first
    slots: int
    kv_len: int
    max_frames: int
    max_trailing: int
    prefill_rows: int  # prompts per padded prefill pass
    views: tuple[int, ...]  # KV view lengths with a CUDA graph each (none without graphs)
    state_bytes: int  # slot state, talker KV included
    kv_bytes: int
    activation_bytes: int  # one decode step (the graph pool on GPU)
    prefill_bytes: int

    def held(self, graphs: bool) -> dict[str, int]:
        """Held at once, by part: the state, and the step's pool beside a prefill pass (graphs)
        or whichever of the two is larger (eager: they never overlap)."""
        step = {"decode_step": self.activation_bytes, "prefill": self.prefill_bytes}
        if not graphs:
            larger = max(step, key=step.__getitem__)
            step = {larger: step[larger]}
        return {"kv_cache": self.kv_bytes, "slot_state": self.state_bytes - self.kv_bytes, **step}

    def working_bytes(self, graphs: bool) -> int:
        return sum(self.held(graphs).values())


@dataclass(frozen=True)
class MemoryPlan:
    budget_bytes: int
    weights_bytes: int
    margin_bytes: int
    vocoder_batch: int
    vocoder_bytes: int
    groups: tuple[GroupPlan, ...]
    graphs: bool
    requested: int | None  # the --batch-size asked for; None = auto
    # The largest --batch-size whose plan fits, up to the one asked for (auto: up to its cap);
    # None: not even 1
    largest_fitting: int | None
    # Vocoder windows of more rows x frames decode without a graph (the tuning's
    # vocoder_graph_max); None: every window shape has one
    vocoder_graph_max: int | None = None

    @property
    def slots(self) -> int:
        return max((g.slots for g in self.groups), default=0)

    @property
    def peak_group(self) -> GroupPlan | None:
        return max(self.groups, key=lambda g: g.working_bytes(self.graphs), default=None)

    @property
    def total_bytes(self) -> int:
        g = self.peak_group
        working = g.working_bytes(self.graphs) if g else 0
        return self.weights_bytes + working + self.vocoder_bytes + self.margin_bytes

    @property
    def vocoder_graphs(self) -> int:
        """The speech decoder's CUDA graphs at most (qtts.core.engine.vocoder.vocoder_graphs): one
        per window shape, frame bucket x power-of-two rows up to the vocoder batch; none without
        graphs. They share one pool, sized by the largest shape (vocoder_bytes), so their count
        costs capture time and instantiation (the margin), not pool bytes. A job captures only
        the shapes its rows meet, each when first met."""
        if not self.graphs:
            return 0
        most = self.vocoder_graph_max
        shapes = bucket_shapes(self.vocoder_batch)
        return sum(most is None or rows * frames <= most for rows, frames in shapes)

    @property
    def decode_graphs(self) -> int:
        """The decode step's CUDA graphs: one per KV view of each length group's pass, captured
        when that pass is built, before its first step."""
        return sum(len(g.views) for g in self.groups)

    @property
    def fits(self) -> bool:
        return all(g.slots >= 1 for g in self.groups) and self.total_bytes <= self.budget_bytes

    def parts(self) -> dict[str, int]:
        """What total_bytes holds, by part (the peak group's as GroupPlan.held counts them): the
        values add up to it."""
        g = self.peak_group
        return {
            "weights": self.weights_bytes,
            **(g.held(self.graphs) if g else {"kv_cache": 0, "slot_state": 0}),
            "vocoder": self.vocoder_bytes,
            "margin": self.margin_bytes,
        }

    def as_json(self) -> dict:
        """`qtts plan`'s JSON. `memory` splits total_bytes into parts that add up to it; the flat
        *_bytes fields stay as before for scripts that read them (state_bytes includes kv_bytes,
        and without graphs only the larger of activation_bytes and prefill_bytes is held)."""
        g = self.peak_group
        return {
            "slots": self.slots,
            "fits": self.fits,
            "requested_batch_size": self.requested,
            "largest_batch_size_that_fits": self.largest_fitting,
            "gpu_bytes": self.budget_bytes,
            "total_bytes": self.total_bytes,
            "weights_bytes": self.weights_bytes,
            "kv_bytes": g.kv_bytes if g else 0,
            "state_bytes": g.state_bytes if g else 0,
            "activation_bytes": g.activation_bytes if g else 0,
            "prefill_bytes": g.prefill_bytes if g else 0,
            "vocoder_bytes": self.vocoder_bytes,
            "margin_bytes": self.margin_bytes,
            "vocoder_batch": self.vocoder_batch,
            "vocoder_graphs": self.vocoder_graphs,
            "decode_graphs": self.decode_graphs,
            "memory": self.parts(),
            "groups": [
                {"rows": len(x.rows), "slots": x.slots, "kv_len": x.kv_len, "graphs": len(x.views)}
                for x in self.groups
            ],
        }

    def summary(self) -> str:
        """The plan in one log line."""
        groups = ", ".join(f"{len(g.rows)}x{g.kv_len}@{g.slots}" for g in self.groups)
        return (
            f"memory plan: {self.slots} slots, {len(self.groups)} length group(s) "
            f"[rows x kv_len @ slots: {groups}], vocoder batch {self.vocoder_batch}, "
            f"{self.total_bytes / GIB:.1f} of {self.budget_bytes / GIB:.1f} GiB"
            + ("" if self.fits else " (DOES NOT FIT)")
        )


def length_groups(rows: Sequence[RowShape]) -> list[list[int]]:
    """Row indices cut into groups by KV need, longest first (stable for equal needs)."""
    order = sorted(range(len(rows)), key=lambda i: -rows[i].kv_need)
    groups: list[list[int]] = []
    for i in order:
        if not groups or rows[i].kv_need < GROUP_KV_SHARE * rows[groups[-1][0]].kv_need:
            groups.append([])
        groups[-1].append(i)
    return groups


def merge_groups(
    groups: list[list[int]], slots_of: Callable[[list[int]], int]
) -> list[tuple[list[int], int]]:
    """Length groups (longest first) -> (rows, slots) of each group to run: each shorter group
    joined to the one before it where the joined group still gets at least the slots each had
    alone (slots_of(rows): a group's slots, 0 where it does not fit). On a large card a whole
    job is then one engine pass; where a long group's cache leaves fewer slots, the short rows
    keep their own pass with more. The rows stay in their longest-first order."""
    merged: list[tuple[list[int], int]] = []
    for ix in groups:
        alone = slots_of(ix)
        if merged:
            rows, before = merged[-1]
            joined = rows + ix
            slots = slots_of(joined)
            if slots >= max(before, alone, 1):
                merged[-1] = (joined, slots)
                continue
        merged.append((list(ix), alone))
    return merged


def plan_memory(
    rows: Sequence[RowShape],
    dims: Dims,
    budget_bytes: int,
    weights_bytes: int,
    tuning: EngineTuning,
    batch_size: int | None = None,
    device_kind: str = "cuda",
) -> MemoryPlan:
    """batch_size None: as many slots per group as fit (up to MAX_AUTO_SLOTS); an explicit size is
    used as asked, and the plan says whether it fits and the largest size that would."""
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    margin = max(MIN_MARGIN, int(MARGIN_SHARE * budget_bytes))
    spare = budget_bytes - weights_bytes - margin
    longest = max((r.budget for r in rows), default=1)
    per_utterance = vocoder_bytes(dims, 1, longest, graphs=tuning.cuda_graphs)
    cap = VOCODER_MAX_BATCH.get(device_kind, VOCODER_MAX_BATCH["cuda"])  # meta stands in for CUDA
    at_most = min(cap, max(len(rows), 1))  # never more rows than the job has
    vocoder_batch = max(1, min(at_most, int(VOCODER_SHARE * spare) // per_utterance))
    room = spare - vocoder_batch * per_utterance  # for the largest group's working set
    groups = length_groups(rows)
    kernel_sampler = sampler_on(tuning.sampler, device_kind) == "triton"  # the one that runs

    def group(shape: _Members, slots: int) -> GroupPlan:
        return _group(shape, slots, d=dims, tuning=tuning, kernel_sampler=kernel_sampler)

    def fits(shape: _Members, slots: int) -> bool:
        return group(shape, slots).working_bytes(tuning.cuda_graphs) <= room

    if batch_size is None:  # per group, as many as fit (0 where not even one does: fits is False)
        upper = MAX_AUTO_SLOTS.get(device_kind, MAX_AUTO_SLOTS["cpu"])

        def slots_of(ix: list[int]) -> int:
            shape = _Members.of(rows, ix)  # once per group: the search only varies the slots
            return _largest(lambda s: fits(shape, s), min(upper, len(ix)))
    else:
        upper = batch_size

        def slots_of(ix: list[int]) -> int:  # as asked; 0 where that does not fit
            s = min(batch_size, len(ix))
            return s if fits(_Members.of(rows, ix), s) else 0

    # The largest --batch-size (up to the one asked for, or auto's cap) whose every group fits:
    # the groups as cut, which hold the least at once (a merge happens only where it fits).
    cut = [_Members.of(rows, ix) for ix in groups]
    largest = _largest(lambda s: all(fits(m, min(s, len(m.rows))) for m in cut), upper) or None
    merged = merge_groups(groups, slots_of)
    if batch_size is None:
        chosen = [slots for _, slots in merged]
    else:
        chosen = [min(batch_size, len(ix)) for ix, _ in merged]
    planned = [group(_Members.of(rows, ix), s) for (ix, _), s in zip(merged, chosen, strict=True)]
    return MemoryPlan(
        budget_bytes=budget_bytes,
        weights_bytes=weights_bytes,
        margin_bytes=margin,
        vocoder_batch=vocoder_batch,
        vocoder_bytes=vocoder_batch * per_utterance,
        groups=tuple(planned),
        graphs=tuning.cuda_graphs,
        requested=batch_size,
        largest_fitting=largest,
        vocoder_graph_max=tuning.vocoder_graph_max,
    )


@dataclass(frozen=True)
class _Members:
    """What a group's memory depends on besides its slots: its rows and their longest needs."""

    rows: tuple[int, ...]
    kv_len: int  # aligned: every view 16-aligned
    max_frames: int
    max_trailing: int
    width: int  # the longest prompt

    @classmethod
    def of(cls, rows: Sequence[RowShape], index: list[int]) -> _Members:
        members = [rows[i] for i in index]
        return cls(
            rows=tuple(index),
            kv_len=aligned_kv_len(max(r.kv_need for r in members)),
            max_frames=max(r.budget for r in members),
            max_trailing=max(r.trailing for r in members),
            width=max(r.prompt for r in members),
        )


def _group(
    members: _Members, slots: int, d: Dims, tuning: EngineTuning, kernel_sampler: bool
) -> GroupPlan:
    kv_len, max_frames, max_trailing = members.kv_len, members.max_frames, members.max_trailing
    width = members.width
    prefill_rows = max(1, min(tuning.prefill_group, slots))
    return GroupPlan(
        rows=members.rows,
        slots=slots,
        kv_len=kv_len,
        max_frames=max_frames,
        max_trailing=max_trailing,
        prefill_rows=prefill_rows,
        views=tuple(view_lengths(tuning.view_bucket, kv_len)) if tuning.cuda_graphs else (),
        state_bytes=slot_state_bytes(d, slots, kv_len, max_frames, max_trailing),
        kv_bytes=slots * kv_len * d.kv_bytes_per_position(),
        activation_bytes=step_activation_bytes(
            d, slots, kv_len, not tuning.grouped_attention, kernel_sampler
        ),
        prefill_bytes=prefill_activation_bytes(
            d, prefill_rows, width, tuning.layer_path == "fused", kernel_sampler
        ),
    )


def _largest(ok, upper: int) -> int:
    """The largest s in 1..upper with ok(s) (ok is monotone: true up to some point), else 0."""
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
