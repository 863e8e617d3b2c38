"""Progress during a long row: each segment of a split row is reported to the ProgressSink as the
synthesizer makes it, not only the row once its last segment is joined and written.

A 100,000-character row is hundreds of segments and minutes of work; counted by rows alone the
progress reads `0/7 rows ... ETA ?` all that time. Wrapping the loaded synthesizer sees every
request as it finishes, the segments of split rows among them (their ids name the row:
qtts.core.jobs.long_text.segments.segment_id), without touching the chunk loop both backends
share. The row's own advance then replaces its segments' audio (ProgressSink.advance row_id).
Knows requests and utterances; no tensors.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from qtts.core.jobs.contract.interfaces import LoadSynthesizer, ProgressSink, Synthesizer
from qtts.core.jobs.long_text.segments import row_of_segment
from qtts.core.synthesis.requests import GenerationOptions, Request, RowFailure, Utterance


def with_segment_progress(load: LoadSynthesizer, progress: ProgressSink | None) -> LoadSynthesizer:
    """The factory, its synthesizers reporting segments to `progress` (none: as it was)."""
    if progress is None:
        return load
    return lambda text_model, placement: SegmentReporting(load(text_model, placement), progress)


class SegmentReporting:
    """A Synthesizer that tells `progress` of each segment of a split row it yields."""

    def __init__(self, synth: Synthesizer, progress: ProgressSink) -> None:
        self.synth, self.progress = synth, progress

    @property
    def clock(self):
        """The wrapped synthesizer's SynthesisClock (where its time went), if it keeps one."""
        return getattr(self.synth, "clock", None)

    def synthesize(
        self, requests: Sequence[Request], options: GenerationOptions
    ) -> Iterator[Utterance | RowFailure]:
        items = self.synth.synthesize(requests, options)
        try:
            for item in items:
                row_id = row_of_segment(item.id)
                if row_id is not None and isinstance(item, Utterance):
                    self.progress.segment(row_id, len(item.audio) / item.sample_rate)
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:  # an early close reaches the real stream (frees the engine)
                close()
