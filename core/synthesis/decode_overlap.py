"""Overlap the vocoder with decoding: finished groups are decoded to audio on a worker thread.

The decode loop hands over each group of finished utterances and goes straight back to stepping the
engine; a single worker thread runs the speech decoder (on its own CUDA stream on GPU, after waiting
for the step that produced the codes) and results come back in hand-over order. A bounded queue
keeps audio from piling up when the decoder is the slower side. `work` takes the device gate
itself around its device work, a micro-batch at a time (core/synthesis/device_gate.py), so the
producer can take the gate between two of them to keep the device free of other threads' work
(CUDA graph capture needs that); the worker holds it only to drop a finished group's device
references. Knows nothing of text or files.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from typing import TypeVar

import torch

from qtts.core.synthesis.device_gate import DeviceGate
from qtts.core.synthesis.synthesis_clock import SynthesisClock

log = logging.getLogger("qtts")
HIGHEST_PRIORITY = -(1 << 10)  # past any device's range: mapped to its highest
# (device index, SMs) -> (green context, its stream): one per split for the process, which keeps
# the context alive as long as its stream (a bench makes a vocoder stream per run)
_green_streams: dict[tuple[int, int], tuple[object, torch.cuda.Stream]] = {}
G = TypeVar("G")
R = TypeVar("R")


def decode_stream(device: torch.device) -> torch.cuda.Stream:
    """A stream of `device`'s highest priority, for the decode loop (the vocoder's stays at the
    lowest, which is also the default stream's). Lower numbers win; torch maps a number past the
    range to its end, so this asks for the highest the device and torch's stream pools give."""
    return torch.cuda.Stream(device, priority=HIGHEST_PRIORITY)


def vocoder_stream(device: torch.device, sms: int | None = None) -> torch.cuda.Stream:
    """The vocoder's stream: plain, or (sms) one of a CUDA green context limited to that many
    SMs. A vocoder kernel already on the SMs is not preempted, so with every SM open to it the
    decode loop's chain of small kernels waits behind it; limited, it leaves the others to the
    loop. Green contexts are a beta torch API whose form changed between releases: where this
    torch or driver cannot make one, the warning says why and the stream is a plain one. The
    vocoder's CUDA graphs must be captured on this stream for the limit to hold in their replay
    (GraphedVocoder's capture_stream). The driver rounds the count to its SM granularity, and a
    split asking for every SM may make no group at all (then: a plain stream, with the warning)."""
    if not sms:
        return torch.cuda.Stream(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if (index, sms) in _green_streams:
        return _green_streams[index, sms][1]
    try:
        from torch.cuda import green_contexts

        if not getattr(green_contexts, "SUPPORTED", False):
            raise RuntimeError("this torch build has no green contexts")
        context = green_contexts.GreenContext.create(num_sms=sms, device_id=index)
        if not hasattr(context, "Stream"):
            raise RuntimeError("this torch's GreenContext has no Stream()")
        stream = context.Stream()
    except Exception as e:  # noqa: BLE001 -- speed, never the job
        log.warning("QTTS_VOCODER_SMS=%d: no green context (%s); a plain vocoder stream", sms, e)
        return torch.cuda.Stream(device)
    _green_streams[index, sms] = (context, stream)
    log.info("vocoder stream: a green context of %d SMs (the driver rounds to its SM groups)", sms)
    return stream


def prioritized(items: Iterable[G], stream: torch.cuda.Stream | None) -> Iterator[G]:
    """items, each produced with `stream` as the current stream (None: as they come). The two
    streams wait for each other on the device (no host sync): the producer's for what the caller
    enqueued before asking for the next item (a voice-clone reference's x-vector, say), the
    caller's for the item's work before the item leaves, so what the caller enqueues after it,
    such as `overlapped`'s hand-over event, follows the work that made it. The stream is entered
    only around the producer's own code, never while the caller holds an item; closing this
    generator closes the producer on its stream too."""
    if stream is None:
        yield from items
        return
    it = iter(items)
    try:
        while True:
            caller = torch.cuda.current_stream(stream.device)
            stream.wait_stream(caller)
            with torch.cuda.stream(stream):
                try:
                    item = next(it)
                except StopIteration:
                    caller.wait_stream(stream)
                    return
            caller.wait_stream(stream)
            yield item
    finally:
        close = getattr(it, "close", None)
        if close is not None:  # an early stop: the producer's cleanup runs on its stream
            with torch.cuda.stream(stream):
                close()


def overlapped(
    groups: Iterable[G],
    work: Callable[[G], R],
    device: torch.device,
    *,
    max_pending: int = 4,
    gate: DeviceGate | None = None,
    stream: torch.cuda.Stream | None = None,
    inline: bool = False,
    clock: SynthesisClock | None = None,
) -> Iterator[R]:
    """work(group) per group on one worker thread, overlapping the producer; results in order.
    gate: the device gate (DeviceGate) the producer shares; the worker takes its yielding side to
    drop a group's device references (work(group) takes it around its own device work).
    stream: the worker's CUDA stream (default: a new one on a CUDA device).
    inline: no worker; each group's work runs on the producer's thread as it arrives (a CPU
    whose cores are better spent on one phase at a time: core/engine/device/cpu_runtime.py).
    clock: counts how long the producer waited on the worker (a full queue: `waited_s`; after
    the last group: `tail_s`)."""
    clock = clock or SynthesisClock()
    release = gate.yielding if gate is not None else nullcontext
    if inline:  # one thread: nothing can capture meanwhile
        for group in groups:
            result = work(group)
            del group
            yield result
        return
    if stream is None and device.type == "cuda":
        stream = torch.cuda.Stream(device)

    def work_on(group: G, ready: torch.cuda.Event | None) -> R:
        if stream is None:
            return work(group)
        with torch.cuda.stream(stream):
            with release():  # a CUDA call too: never inside a capture on the producer's thread
                stream.wait_event(ready)  # the codes were written on the producer's stream
            return work(group)

    def run(handed: list) -> R:
        # The worker's references to the group's device tensors and the event are dropped while
        # it holds the gate: a free outside it could land inside a graph capture on the
        # producer's thread. References the producer keeps are freed on its own thread, which is
        # safe; a failed work's traceback keeps its locals until the producer reads it.
        try:
            return work_on(*handed)
        finally:
            with release():
                handed.clear()

    pending: deque[Future[R]] = deque()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="qtts-vocoder") as pool:
        try:
            for group in groups:
                ready = None
                if stream is not None:
                    ready = torch.cuda.Event()
                    ready.record(torch.cuda.current_stream(device))
                handed = [group, ready]
                del group, ready  # the worker holds the only references from here on
                pending.append(pool.submit(run, handed))
                while pending and (pending[0].done() or len(pending) > max_pending):
                    start = time.perf_counter()
                    result = pending.popleft().result()
                    clock.waited_s += time.perf_counter() - start
                    yield result
            while pending:
                start = time.perf_counter()
                result = pending.popleft().result()
                clock.tail_s += time.perf_counter() - start
                yield result
        finally:
            for f in pending:  # an early stop (interrupt): drop work not yet started
                f.cancel()
