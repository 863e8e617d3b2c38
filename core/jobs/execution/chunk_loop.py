"""One chunk of rows through the synthesizer into the recorder: the loop both backends run (this
process, or each Ray actor). An id the chunk did not ask for stops the job (a synthesizer bug); a
row never returned is failed, saying so. Knows chunks, the synthesizer protocol and the recorder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext

from qtts.core.jobs.contract.interfaces import Synthesizer
from qtts.core.jobs.long_text.segments import synthesize_chunk
from qtts.core.jobs.output.recorder import Outcome, RowRecorder
from qtts.core.jobs.work.chunks import Chunk
from qtts.core.synthesis.requests import GenerationOptions


def run_chunk(
    synth: Synthesizer,
    chunk: Chunk,
    options: GenerationOptions,
    recorder: RowRecorder,
    guard: Callable[[], AbstractContextManager] = nullcontext,
) -> Iterator[Outcome | Future[Outcome]]:
    """Each row's outcome (or the future of one being written), in completion order. guard():
    the context each wait for the synthesizer runs in (the local backend's: signals may
    interrupt it)."""
    budgets = dict(chunk.budgets)
    items = synthesize_chunk(synth, chunk, options, recorder.ctx.on_budget)
    try:
        while True:
            with guard():
                item = next(items, None)
            if item is None:
                break
            if item.id not in budgets:
                raise RuntimeError(f"synthesizer returned an unexpected id {item.id!r}")
            yield recorder.finish(item, chunk.rows[item.id], budgets.pop(item.id))
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
    for row_id in budgets:  # a synthesizer bug, not the row's fault; still, say so
        yield recorder.failed(chunk.rows[row_id], "the synthesizer returned no result")
