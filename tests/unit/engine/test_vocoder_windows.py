"""The speech decoder's bucketed windows (qtts.core.engine.vocoder.vocoder_windows) against the
official chunking (core/model/codec.py decode_utterances, tied to the official code in tests/parity)
and against one plain decoder call: padding frames and splitting groups change no kept sample; the
decoder sees only the bucket shapes; padding stays within its bound (MAX_WASTE)."""

from fractions import Fraction

import pytest
import torch
from live_bytes import LiveBytes
from tiny_models import fast_tiny_decode, tiny_decoder

from qtts.core.engine.plan.footprint import Dims, vocoder_bytes
from qtts.core.engine.vocoder.vocoder_windows import (
    CHUNK_FRAMES,
    LEFT_CONTEXT,
    MAX_WASTE,
    batch_pieces,
    bucket_frames,
    bucket_shapes,
    cut_windows,
    decode_bucketed,
    frame_buckets,
    padding_waste,
    worst_padding_waste,
)
from qtts.core.model.codec import SpeechDecoder, decode_utterances
from qtts.core.model.sizes import decoder_config, model_config

UP = 1920
# fp32 on one machine, the same weights, each kept sample computed from the same inputs: only a
# kernel's blocking over a longer or narrower tensor may reorder a sum. Seen: 3.5e-8.
BUCKET_ATOL = 1e-6


@pytest.fixture(scope="module")
def decoder() -> SpeechDecoder:
    return tiny_decoder()


@pytest.fixture(autouse=True)
def _fast_tiny_decode():
    with fast_tiny_decode():
        yield


def _codes(lengths, seed=0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 64, (n, 16), generator=gen) for n in lengths]


def _assert_rows_close(got, want, lengths):
    assert [a.shape[0] for a in got] == [n * UP for n in lengths]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g, w, rtol=0, atol=BUCKET_ATOL, msg=f"row {i}")


def test_bucketed_decode_equals_the_official_chunking_around_chunk_edges(decoder):
    lengths = (299, 300, 301, 325, 600)  # one chunk, one and a bit, two (a short last window)
    codes = _codes(lengths)
    _assert_rows_close(decode_bucketed(decoder, codes), decode_utterances(decoder, codes), lengths)


# The same rules at a small scale (chunk 12, context 3, up to 50% padding: windows of 3, 6, 10,
# 12 or 15 frames), so many groups and every edge cost little audio.
SMALL = dict(chunk=12, context=3, max_waste=0.5)


@pytest.mark.parametrize(
    "lengths",
    [
        (11, 12, 13, 15, 24, 25, 26),
        (0, 1, 2, 3, 4),
        (40, 7),
        (9,) * 7,
        (37, 1, 12, 24, 2, 5, 3, 30),
    ],
    ids=["edges", "tiny", "uneven", "equal", "many"],
)
def test_bucketed_groups_equal_the_official_chunking(decoder, lengths):
    codes = _codes(lengths, seed=len(lengths))
    want = decode_utterances(decoder, codes, chunk_size=12, left_context=3)
    _assert_rows_close(decode_bucketed(decoder, codes, **SMALL), want, lengths)


def test_a_row_within_one_chunk_is_one_plain_decoder_call(decoder):
    """Whole-row decode vs windowed decode: a row of at most 300 frames, padded to its bucket
    and decoded beside longer rows, is the decoder run on that row alone."""
    lengths = (300, 299, 180, 26, 3)
    codes = _codes(lengths, seed=1)
    got = decode_bucketed(decoder, codes)
    with torch.inference_mode():
        for i, c in enumerate(codes):
            alone = decoder(c.T[None])[0]  # [n * UP], no padding, no chunks
            torch.testing.assert_close(got[i], alone, rtol=0, atol=BUCKET_ATOL, msg=f"row {i}")


def test_the_decoder_sees_only_bucket_shapes(decoder):
    seen = []

    def recording(codes):  # [rows, Q, frames]
        seen.append((codes.shape[0], codes.shape[2]))
        return decoder(codes)

    lengths = (31, 30, 29, 12, 7, 14, 13, 12, 50, 8, 2)  # first chunk: 8 + 2 + 1 rows
    decode_bucketed(decoder, _codes(lengths, seed=2), recording, **SMALL)
    assert set(seen) <= bucket_shapes(16, **SMALL)
    assert seen[:3] == [(8, 12), (2, 10), (1, 3)] and {rows for rows, _ in seen} == {8, 4, 2, 1}
    assert {frames for _, frames in seen} <= set(frame_buckets(**SMALL)) == {3, 6, 10, 12, 15}
    assert len(bucket_shapes(16)) == len(TABLE) * 5  # rows 1, 2, 4, 8, 16


# The window lengths at the real chunking: each the largest within 10% of the one before plus a
# frame, the chunk (300) and a full later window (325) exact. A longer table is more CUDA graphs.
TABLE = [25, 28, 31, 35, 39, 44, 49, 55, 61, 68, 75, 83, 92, 102, 113, 125, 138, 152, 168, 185,
         204, 225, 248, 273, 300, 325]  # fmt: skip


def test_the_frame_table_pads_at_most_max_waste_from_the_context_up():
    assert frame_buckets() == TABLE and len(TABLE) == 26 and MAX_WASTE == 0.10
    for n in range(1, CHUNK_FRAMES + LEFT_CONTEXT + 1):  # brute force: the smallest length >= n
        b = bucket_frames(n)
        assert b == min(t for t in TABLE if t >= n), n
        if n <= LEFT_CONTEXT:
            assert b == LEFT_CONTEXT, n  # under 2 s (rare in datasets): padded to the context
        else:
            assert 10 * b <= 11 * n, (n, b)  # b <= 1.1 n, in integers
    assert worst_padding_waste() == padding_waste([40]) == 0.1  # 40 -> 44 frames
    assert bucket_frames(CHUNK_FRAMES) == CHUNK_FRAMES  # a long row's first window: no padding


@pytest.mark.parametrize("max_waste", [0.0, 0.05, 0.1, 0.25, 1.0])
@pytest.mark.parametrize("chunk, context", [(300, 25), (12, 3), (325, 0), (2, 5)])
def test_any_table_keeps_its_bound(chunk, context, max_waste):
    table = frame_buckets(chunk, context, max_waste)
    assert table == sorted(set(table)) and table[-1] == chunk + context
    assert chunk in table or chunk < table[0]
    for n in range(table[0], chunk + context + 1):
        bound = (1 + Fraction(max_waste)) * n  # exact: no float rounding either way
        assert bucket_frames(n, chunk, context, max_waste) <= bound, (table, n)
    assert worst_padding_waste(chunk, context, max_waste) <= max_waste


def test_rows_of_every_length_waste_at_most_max_waste():
    """Every row of 25 frames (2 s) or more, alone or in a group: padding adds at most 10% to
    the frames its windows need (their context included)."""
    for n in range(LEFT_CONTEXT, 1500):
        assert padding_waste([n]) <= MAX_WASTE, n
    gen = torch.Generator().manual_seed(1)
    for _ in range(200):
        count = int(torch.randint(1, 33, (1,), generator=gen))
        lengths = torch.randint(LEFT_CONTEXT, 2000, (count,), generator=gen).tolist()
        assert padding_waste(lengths) <= MAX_WASTE, lengths
    assert padding_waste([32]) == 3 / 32  # multiples of 25 padded it to 50: 56%
    assert padding_waste([]) == 0.0 and padding_waste([0, 0]) == 0.0
    assert padding_waste([1]) == 24.0  # under 2 s a row pads to the context


def test_padding_waste_counts_each_row_of_a_piece():
    """Rows decoded together may need different frames within one bucket: each row's own."""
    windows = cut_windows([44, 40])
    assert [(w.rows, w.frames) for w in windows] == [(2, 44)]
    assert padding_waste([44, 40]) == (88 - 84) / 84
    # Two windows: 300 kept (no padding), then 25 context + 100 kept (125: no padding), or
    # 25 + 40 kept (65, decoded as 68).
    assert padding_waste([400]) == 0.0 and padding_waste([340]) == 3 / (300 + 65)


def test_windows_tile_every_row_and_pad_within_the_bound():
    for n in [*range(1, 80), *range(280, 350), 599, 600, 601, 625, 650, 900, 1000]:
        windows = cut_windows([n])
        kept = [(w.start, w.start + w.kept) for w in windows]
        assert kept == [(s, min(s + CHUNK_FRAMES, n)) for s in range(0, n, CHUNK_FRAMES)]
        for w in windows:
            assert w.context == (LEFT_CONTEXT if w.start else 0)
            assert w.frames == bucket_frames(w.context + w.kept), (n, w)


def test_every_row_of_a_group_pads_only_to_its_own_bucket():
    """Rows share a window only when their own windows fall in the same bucket: no row is padded
    to a longer one's length, however mixed the group."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        lengths = torch.randint(1, 1000, (int(torch.randint(1, 17, (1,), generator=gen)),),
                                generator=gen).tolist()  # fmt: skip
        ordered = sorted(lengths, reverse=True)
        covered = [0] * len(lengths)
        for w in cut_windows(lengths):
            assert w.rows in (1, 2, 4, 8, 16)
            for n in ordered[w.first_row : w.first_row + w.rows]:
                own = w.context + min(CHUNK_FRAMES, n - w.start)
                assert n > w.start and w.frames == bucket_frames(own), (lengths, w)
            for j in range(w.first_row, w.first_row + w.rows):
                covered[j] += 1
        assert covered == [-(-n // CHUNK_FRAMES) for n in ordered]  # each chunk of a row once


def test_groups_are_cut_by_bucket_into_powers_of_two_longest_first():
    assert batch_pieces(11) == [8, 2, 1] and batch_pieces(16) == [16] and batch_pieces(0) == []
    windows = cut_windows([40, 700, 300, 301, 10])  # longest first: 700, 301, 300, 40, 10
    first = [(w.first_row, w.rows, w.kept, w.frames) for w in windows if w.start == 0]
    assert first == [(0, 2, 300, 300), (2, 1, 300, 300), (3, 1, 40, 44), (4, 1, 10, 25)]
    later = [(w.start, w.first_row, w.rows, w.kept, w.frames) for w in windows if w.start]
    assert later == [(300, 0, 1, 300, 325), (300, 1, 1, 1, 28), (600, 0, 1, 100, 125)]


def test_memory_bound_holds_for_bucketed_windows():
    """The planner's vocoder bytes bound the bucketed decode (padded windows) at the real
    dimensions, on the meta device, as tests/unit/engine/test_footprint.py does for the official
    chunking; with graphs the bound only grows."""
    with torch.device("meta"):
        decoder = SpeechDecoder(decoder_config("1.7b")).to(torch.bfloat16)
    dims = Dims.of(model_config("1.7b"), decoder_config("1.7b"), 2, 2)
    for frames in (26, 301, 700):
        codes = [torch.zeros(frames, 16, dtype=torch.long, device="meta") for _ in range(3)]
        with LiveBytes() as live:
            decode_bucketed(decoder, codes)
        bound = vocoder_bytes(dims, 3, frames)
        assert live.peak <= bound <= 2 * live.peak, (frames, live.peak, bound)
        # With graphs the pool also holds the largest window's activations, captured first
        # whatever the rows' lengths: a full window of every reserved row, measured here.
        full = [torch.zeros(CHUNK_FRAMES + LEFT_CONTEXT, 16, dtype=torch.long, device="meta")] * 3
        with LiveBytes() as pool:
            decode_bucketed(decoder, full, chunk=CHUNK_FRAMES + LEFT_CONTEXT, context=0)
        assert vocoder_bytes(dims, 3, frames, graphs=True) - bound >= pool.peak, frames


@pytest.mark.parametrize("lengths", [(37, 1, 12, 24, 2, 5, 3, 30), (26, 25, 24, 20, 13, 9, 4)])
def test_joined_windows_equal_the_official_chunking(decoder, lengths):
    """Rows padded up to a longer row's bucket (join_waste) keep every sample: the decoder is
    causal, so frames after a row's end change nothing before it."""
    assert cut_windows(lengths, **SMALL, join_waste=1.0) != cut_windows(lengths, **SMALL)  # joins
    codes = _codes(lengths, seed=7)
    want = decode_utterances(decoder, codes, chunk_size=12, left_context=3)
    got = decode_bucketed(decoder, codes, **SMALL, join_waste=1.0)
    _assert_rows_close(got, want, lengths)


def test_joining_makes_fewer_fuller_windows_within_its_padding_bound():
    """A real job's finished rows (varied lengths): each in its own bucket most windows hold one
    or two rows; joined, windows hold more, every row padded by at most JOIN_WASTE of its need,
    every chunk of every row decoded once, rows still in powers of two."""
    from qtts.core.engine.vocoder.vocoder_windows import JOIN_WASTE, joined_runs

    gen = torch.Generator().manual_seed(3)
    for _ in range(100):
        lengths = torch.randint(40, 700, (16,), generator=gen).tolist()
        ordered = sorted(lengths, reverse=True)
        alone, joined = cut_windows(lengths), cut_windows(lengths, join_waste=JOIN_WASTE)
        assert len(joined) <= len(alone)
        covered = [0] * len(lengths)
        for w in joined:
            assert w.rows in (1, 2, 4, 8, 16)
            for j in range(w.first_row, w.first_row + w.rows):
                need = w.context + min(CHUNK_FRAMES, ordered[j] - w.start)
                own = bucket_frames(need)
                pad = w.frames - need
                assert need <= w.frames and (w.frames == own or pad <= JOIN_WASTE * need)
                covered[j] += 1
        assert covered == [-(-n // CHUNK_FRAMES) for n in ordered]
    spread = list(range(190, 94, -6))  # 16 rows of 7.6 down to 3.8 s
    assert (len(cut_windows(spread)), len(cut_windows(spread, join_waste=JOIN_WASTE))) == (10, 6)
    assert joined_runs([10, 9, 8], [11, 10, 8], 0.0) == [1, 1, 1]
    assert joined_runs([10, 9, 8], [11, 10, 8], 0.25) == [2, 1]  # 11 pads 8 by 37%: apart
    with pytest.raises(ValueError, match="join_waste"):
        cut_windows([10], join_waste=-0.1)
