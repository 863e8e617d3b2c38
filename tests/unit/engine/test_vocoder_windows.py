"""The speech decoder's bucketed windows (qtts.core.engine.vocoder_windows) against the official
chunking (core/model/codec.py decode_utterances, tied to the official code in tests/parity) and
against one plain decoder call: padding frames and splitting groups change no kept sample; the
decoder sees only the bucket shapes; padding stays within its bound."""

import pytest
import torch
from live_bytes import LiveBytes
from tiny_models import fast_tiny_decode, tiny_decoder

from qtts.core.engine.footprint import Dims, vocoder_bytes
from qtts.core.engine.vocoder_windows import (
    CHUNK_FRAMES,
    FRAME_STEP,
    LEFT_CONTEXT,
    batch_pieces,
    bucket_shapes,
    decode_bucketed,
    frame_buckets,
    plan_windows,
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


# The same rules at a small scale (chunk 12, context 3, step 3: windows of 3 .. 15 frames), so
# many groups and every edge cost little audio.
SMALL = dict(chunk=12, context=3, step=3)


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
    assert seen[:3] == [(8, 12), (2, 9), (1, 3)] and {rows for rows, _ in seen} == {8, 4, 2, 1}
    assert {frames for _, frames in seen} <= set(frame_buckets(**SMALL)) == {3, 6, 9, 12, 15}
    assert frame_buckets() == list(range(25, 326, 25))  # 13 window lengths
    assert len(bucket_shapes(16)) == 13 * 5  # rows 1, 2, 4, 8, 16


def test_windows_tile_every_row_and_pad_less_than_one_step():
    for n in [*range(1, 80), *range(280, 350), 599, 600, 601, 625, 650, 900, 1000]:
        windows = plan_windows([n])
        kept = [(w.start, w.start + w.kept) for w in windows]
        assert kept == [(s, min(s + CHUNK_FRAMES, n)) for s in range(0, n, CHUNK_FRAMES)]
        for w in windows:
            assert w.context == (LEFT_CONTEXT if w.start else 0)
            assert 0 <= w.frames - (w.context + w.kept) < FRAME_STEP, (n, w)


def test_every_row_of_a_group_pads_less_than_one_step():
    """Rows share a window only when their own windows fall in the same bucket: no row is padded
    to a longer one's length, however mixed the group."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        lengths = torch.randint(1, 1000, (int(torch.randint(1, 17, (1,), generator=gen)),),
                                generator=gen).tolist()  # fmt: skip
        ordered = sorted(lengths, reverse=True)
        covered = [0] * len(lengths)
        for w in plan_windows(lengths):
            assert w.rows in (1, 2, 4, 8, 16)
            for n in ordered[w.first_row : w.first_row + w.rows]:
                own = w.context + min(CHUNK_FRAMES, n - w.start)
                assert n > w.start and 0 <= w.frames - own < FRAME_STEP, (lengths, w)
            for j in range(w.first_row, w.first_row + w.rows):
                covered[j] += 1
        assert covered == [-(-n // CHUNK_FRAMES) for n in ordered]  # each chunk of a row once


def test_groups_are_cut_by_bucket_into_powers_of_two_longest_first():
    assert batch_pieces(11) == [8, 2, 1] and batch_pieces(16) == [16] and batch_pieces(0) == []
    windows = plan_windows([40, 700, 300, 301, 10])  # longest first: 700, 301, 300, 40, 10
    first = [(w.first_row, w.rows, w.kept, w.frames) for w in windows if w.start == 0]
    assert first == [(0, 2, 300, 300), (2, 1, 300, 300), (3, 1, 40, 50), (4, 1, 10, 25)]
    later = [(w.start, w.first_row, w.rows, w.kept, w.frames) for w in windows if w.start]
    assert later == [(300, 0, 1, 300, 325), (300, 1, 1, 1, 50), (600, 0, 1, 100, 125)]


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
