"""The speaking rate against the voice's own: a split row is measured a segment at a time (its
segments' texts over their own audio), so a row whose later segments speed up is seen even when
its average rate looks right; each voice and language has its own median."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from qtts.core.jobs.long_text.segments import join
from qtts.core.jobs.output.voice_rates import rate_ratios
from qtts.core.synthesis.requests import Utterance

RATE = 24_000


class Records:
    """What rate_ratios reads of a RecordSource: winners' positions and whole columns."""

    def __init__(self, columns: dict[str, list]) -> None:
        self.columns = columns

    def positions(self) -> np.ndarray:
        return np.arange(len(self.columns["chars_per_s"]))

    def column(self, name: str) -> pa.ChunkedArray:
        from qtts.core.jobs.state.records import RECORD_SCHEMA

        return pa.chunked_array([pa.array(self.columns[name], RECORD_SCHEMA.field(name).type)])


def _part(seconds: float) -> Utterance:
    frames = max(int(seconds * 12.5), 1)
    audio = np.full(int(seconds * RATE), 0.1, np.float32)
    return Utterance("x", np.zeros((frames, 16), np.int64), audio, RATE, hit_frame_budget=False)


def test_a_split_row_is_measured_a_segment_at_a_time():
    texts = ["a" * 30, "b" * 30, "c" * 30]  # the same text, said faster and faster
    row = join("r", [_part(2.0), _part(1.5), _part(1.0)], 0.5, [1, 2, 3], texts)
    assert row.segment_chars_per_s == pytest.approx((15.0, 20.0, 30.0))


def test_a_row_whose_later_segments_speed_up_is_seen_against_its_voice():
    n = 6
    columns = {
        "chars_per_s": [15.0, 15.0, 16.0, 14.0, 4.0, 18.0],
        # row 5: split; its average (pauses included) looks fine, its last segment does not
        "segment_chars_per_s": [None] * 5 + [[15.0, 15.5, 31.0]],
        "speaker": ["anna"] * n,
        "instruct": [None] * n,
        "ref_digest": [None] * n,
        "language": ["english"] * 4 + ["chinese", "english"],  # row 4: its own median
    }
    out = rate_ratios(Records(columns), np.ones(n, dtype=bool))
    low, high = out["rate_ratio_min"].to_pylist(), out["rate_ratio_max"].to_pylist()
    median = 15.0  # of the English pieces: 15, 15, 16, 14, 15, 15.5, 31
    assert low[:4] == pytest.approx([1.0, 1.0, 16 / median, 14 / median]) and low[:4] == high[:4]
    assert low[4] == high[4] == pytest.approx(1.0)  # Chinese, alone in its group
    assert low[5] == pytest.approx(1.0) and high[5] == pytest.approx(31 / median)


def test_rows_not_shown_or_without_a_rate_get_none():
    columns = {
        "chars_per_s": [10.0, 20.0, None],
        "segment_chars_per_s": [None, None, None],
        "speaker": ["a"] * 3,
        "instruct": [None] * 3,
        "ref_digest": [None] * 3,
        "language": [None] * 3,
    }
    out = rate_ratios(Records(columns), np.array([True, False, True]))
    assert out["rate_ratio_min"].to_pylist() == [1.0, None, None]


class ChunkedRecords(Records):
    """Records as a RecordSource holds them: in several chunks (a state each, then the
    journals), the winners at positions out of order."""

    def __init__(self, columns: dict[str, list], positions: list[int], cut: int) -> None:
        super().__init__(columns)
        self._positions, self.cut = np.array(positions), cut

    def positions(self) -> np.ndarray:
        return self._positions

    def column(self, name: str) -> pa.ChunkedArray:
        whole = super().column(name).chunk(0)
        return pa.chunked_array([whole.slice(0, self.cut), whole.slice(self.cut)])


def test_a_voice_is_one_group_across_chunks_and_nulls_are_a_value():
    columns = {
        "chars_per_s": [10.0, 20.0, 12.0, 30.0, 8.0, 40.0],
        "segment_chars_per_s": [None] * 6,
        # voices: anna (rows 0, 2, 4), anna with an instruct (1, 3), no speaker (5)
        "speaker": ["anna", "anna", "anna", "anna", "anna", None],
        "instruct": [None, "calm", None, "calm", None, None],
        "ref_digest": [None] * 6,
        "language": ["english"] * 6,
    }
    positions = [4, 0, 3, 5, 2, 1]  # winner k's record
    out = rate_ratios(ChunkedRecords(columns, positions, cut=3), np.ones(6, dtype=bool))
    medians = {0: 10.0, 2: 10.0, 4: 10.0, 1: 25.0, 3: 25.0, 5: 40.0}
    want = [columns["chars_per_s"][p] / medians[p] for p in positions]
    assert out["rate_ratio_min"].to_pylist() == pytest.approx(want)
