"""GPU checks of the speech decoder's graphs (qtts.core.engine.vocoder.vocoder_graphs): replayed
windows give the eager audio, captured on a worker thread with its own stream (as the synthesizer's
vocoder thread does) while the main thread keeps the device busy; one graph per shape.

Skipped without CUDA. Run them on the lent GPU machine: `bash tools/gpu_checks.sh run`.
"""

import threading

import pytest
import torch
from tiny_models import tiny_decoder

from qtts.core.engine.vocoder.vocoder_graphs import GraphedVocoder
from qtts.core.engine.vocoder.vocoder_windows import bucket_shapes, decode_bucketed

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

LENGTHS = (299, 300, 301, 325, 600, 40, 7)
# fp32 without TF32; a graph may pick other kernels than the eager run (cuDNN plans per stream).
GRAPH_ATOL = 1e-5


def test_graphs_on_the_vocoder_thread_replay_the_eager_audio():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        decoder = tiny_decoder().cuda()
        gen = torch.Generator().manual_seed(0)
        codes = [torch.randint(0, 64, (n, 16), generator=gen).cuda() for n in LENGTHS]
        want = [a.cpu() for a in decode_bucketed(decoder, codes)]
        graphed, got, errors, busy = (
            GraphedVocoder(decoder, len(LENGTHS)),
            [],
            [],
            threading.Event(),
        )

        def vocoder_thread():
            try:
                with torch.cuda.stream(torch.cuda.Stream()):
                    for _ in range(2):  # first: eager + capture per shape; second: replays
                        got.append([a.cpu() for a in decode_bucketed(decoder, codes, graphed)])
            except Exception as e:  # noqa: BLE001 -- surfaced below, on the test's thread
                errors.append(e)
            finally:
                busy.set()

        worker = threading.Thread(target=vocoder_thread)
        worker.start()
        x = torch.randn(1024, 1024, device="cuda")
        while not busy.is_set():  # the decode loop's stand-in: its own work and allocations
            x = (x @ x).tanh()
            torch.cuda.current_stream().synchronize()
        worker.join()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    assert errors == [] and len(got) == 2
    assert not graphed.eager, "a capture failed (see the log)"
    assert set(graphed.graphs) <= bucket_shapes(len(LENGTHS)) and graphed.graphs
    for run in got:
        for i, (g, w) in enumerate(zip(run, want, strict=True)):
            torch.testing.assert_close(g, w, rtol=0, atol=GRAPH_ATOL, msg=f"row {i}")


def test_joined_windows_replayed_as_graphs_give_each_rows_own_audio():
    """The GPU's default windows (rows joining a longer row's bucket, JOIN_WASTE) through the
    graphs give the audio of each row decoded in its own bucket, eagerly (the decoder is causal:
    padding after a row changes none of its samples)."""
    from qtts.core.engine.vocoder.vocoder_windows import JOIN_WASTE

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        decoder = tiny_decoder().cuda()
        gen = torch.Generator().manual_seed(1)
        lengths = (190, 184, 172, 166, 150, 131, 120, 101, 40, 33)
        codes = [torch.randint(0, 64, (n, 16), generator=gen).cuda() for n in lengths]
        want = [a.cpu() for a in decode_bucketed(decoder, codes)]
        graphed = GraphedVocoder(decoder, 16)
        with torch.cuda.stream(torch.cuda.Stream()):
            got = [a.cpu() for a in decode_bucketed(decoder, codes, graphed, join_waste=JOIN_WASTE)]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    assert not graphed.eager and set(graphed.graphs) <= bucket_shapes(16)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g, w, rtol=0, atol=GRAPH_ATOL, msg=f"row {i}")


def test_graphs_captured_on_a_green_stream_keep_its_sm_limit():
    """QTTS_VOCODER_SMS: the vocoder's graphs are captured on its green context's stream, so a
    replay runs on that context's SMs only. A window whose kernels fill the card must then take
    well over 1.5 times as long on 8 SMs as on all of them (about SMs / 8 times); had the replay
    ignored the limit, the two would take alike. Medians of five replays; a loose bound."""
    from qtts.core.synthesis import decode_overlap

    device = torch.device("cuda", torch.cuda.current_device())
    green = decode_overlap.vocoder_stream(device, 8)
    if (device.index, 8) not in decode_overlap._green_streams:
        pytest.skip("no green context on this torch or driver (the warning says why)")
    decoder = tiny_decoder().cuda()
    codes = torch.randint(0, 64, (16, 16, 325), device="cuda")

    def replay_ms(stream, capture_stream) -> float:
        graphed = GraphedVocoder(decoder, 16, capture_stream=capture_stream)
        times = []
        with torch.cuda.stream(stream), torch.inference_mode():
            graphed(codes)  # its eager first call, then its capture
            for _ in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record()
                graphed(codes)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]

    whole = replay_ms(torch.cuda.Stream(device), None)
    limited = replay_ms(green, green)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    assert limited > 1.5 * whole, (
        f"a window on 8 of {sms} SMs took {limited:.2f} ms against {whole:.2f} ms on all: "
        "the green context's limit did not hold in the graph's replay"
    )
