"""`qtts bench`: end-to-end throughput on random weights of the real model dimensions.

Builds the talker + code predictor + speech decoder at the published 0.6B / 1.7B sizes (or a small
test size) with random weights in memory, forces a fixed number of frames per request (EOS
suppressed), and measures the same path `qtts batch` runs: slot prefill, decode steps (CUDA graphs
on GPU, packed weights on CPU, or the eager module path), batched vocoder, each row's model-free
measures (a job computes them on its writer threads: timed apart here), and optionally WAV
encoding. Knows no manifests and no checkpoints.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from qtts.core.bench.part_clock import PartClock, ms_per_call, sync
from qtts.core.bench.step_parts import step_parts
from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.vocoder.vocoder_windows import padding_waste
from qtts.core.model.codec import SpeechDecoder
from qtts.core.model.config import SamplingParams
from qtts.core.model.sizes import decoder_config, model_config
from qtts.core.model.talker import build_model
from qtts.core.synthesis.prompt import PromptTokens, embed_prompt

SAMPLES_PER_FRAME, SAMPLE_RATE = 1920, 24000
TEXT_LEN = 24  # text tokens per bench row
MEASURED_ROWS = 64  # rows the measures are timed on, after the run (a sample is enough)
# The text the measures count characters of: about what 24 tokens of English spell.
BENCH_TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back home again."


@torch.no_grad()
def random_models(size: str, device, dtype):
    """Talker + decoder at `size` with small random weights, built straight on the device."""
    from qtts.core.model.talker import RotaryEmbedding

    config = model_config(size)
    dev = torch.device(device)
    with torch.device("meta"):
        model, decoder = build_model(config), SpeechDecoder(decoder_config(size))
    model, decoder = model.to_empty(device=dev), decoder.to_empty(device=dev)
    torch.manual_seed(0)
    for module in (model, decoder):
        for name, p in module.named_parameters():
            fill = torch.ones if "cluster_usage" in name else torch.randn
            scale = 1.0 if "cluster_usage" in name else 0.02
            p.data = (fill(p.shape, device=dev) * scale).to(dtype)
    for m in model.modules():
        if isinstance(m, RotaryEmbedding):
            m.inv_freq = m.table(dev)
    return config, model.eval(), decoder.eval()


# "graph": the GPU's default (CUDA graphs over its layer path); on CPU the layer path itself
# (packed by default; QTTS_LAYER_PATH picks another); "eager": the module path, no graphs.
MODES = ("graph", "packed", "fused", "module", "eager")


def fast_mode(device, dtype: torch.dtype = torch.float32) -> str:
    """The path qtts batch takes on this device in this dtype: what `qtts bench` measures by
    default."""
    tuning = EngineTuning.for_device(device, dtype=dtype)
    return "graph" if tuning.cuda_graphs else tuning.layer_path


def mode_tuning(mode: str, device, dtype: torch.dtype = torch.float32) -> EngineTuning:
    """qtts batch's tuning for `device` and `dtype` (environment knobs included) for its fast
    mode, or the eager twin: the module path without graphs."""
    base = EngineTuning.for_device(device, dtype=dtype)
    if mode == "eager":
        return replace(base, cuda_graphs=False, layer_path="module")
    if mode != fast_mode(device, dtype):
        raise ValueError(f"mode {mode!r} does not run on {torch.device(device).type}")
    return base


@dataclass
class BenchResult:
    size: str
    batch: int
    requests: int
    frames: int
    mode: str  # "graph" (CUDA graphs) | "packed" (CPU packed weights) | "eager" (module path)
    wall_s: float = 0.0
    audio_s: float = 0.0
    audio_s_per_s: float = 0.0
    frames_per_s: float = 0.0
    rtf: float = 0.0  # wall seconds per audio second
    phases_s: dict = field(default_factory=dict)  # prefill, decode_loop; vocoder+writing overlap
    # The decode loop apart from the vocoder's tail: steps replayed, the wall time from the start
    # to the last group's hand-over less prefill (and, inline, the vocoding before it), per step,
    # and what came after (the last groups' vocoding and writing, which nothing overlaps). With a
    # vocoder thread, waits for a full hand-over queue count as loop time.
    steps: int = 0
    loop_ms_per_step: float = 0.0
    tail_s: float = 0.0
    vocoder: bool = True  # False: decode only (--no-vocoder), the loop without the vocoder
    step_ms: dict = field(default_factory=dict)  # per decode step: total, predictor, ...
    peak_mem_gb: float | None = None
    auto: bool = False  # the batch size came from the memory plan (--batch-sizes auto)
    view: int = 0  # KV view length the step was profiled at
    roofline: dict = field(default_factory=dict)  # the step's lower bound vs its measured time
    # The vocoder's seconds per second of audio it made (its own clock, on its thread or inline),
    # and the frames its window buckets padded on, as a share of the frames it had to decode.
    vocoder_s_per_audio_s: float = 0.0
    vocoder_padding: float = 0.0
    # The model-free measures (core/jobs/output/recorder.py) of the first rows, in seconds per
    # audio-second.
    measures_s_per_audio_s: float = 0.0
    # Steady state: the audio of every group after the first over the time from the first
    # group's audio to the last's, so the first pass's fill (prefill, an empty pipeline) is left
    # out; None with one group. `groups`: how many the loop handed over.
    groups: int = 0
    steady_audio_s_per_s: float | None = None
    # Where the time went around the timed run: the command's imports and random weights
    # (`start_s`, set by core/bench/size_runs.py), the engine's build before the run (its
    # decode graphs, the kernel compiles of their warm-up; the vocoder's window graphs too with
    # QTTS_VOCODER_CAPTURE=ahead, as a job captures them before decoding), the vocoder's graph
    # captures as each window shape was first met (inside the run, on its thread), the run up
    # to its last decode step, and the drain after it (tail_s).
    time_split: dict = field(default_factory=dict)

    def row(self) -> dict:
        return asdict(self)


def synthetic_tokens(i: int, text_vocab: int, text_len: int) -> PromptTokens:
    rng = np.random.default_rng(i)
    text = rng.integers(10, text_vocab, size=text_len).tolist()
    return PromptTokens([1, 6, 7, *text, 2, 8, 1, 6, 7], None, [2154, 2156, 2050, 2157], 3065)


def bench_plan(config, model, decoder, device, mode, batch, rows, frames, text_len=TEXT_LEN):
    """The memory plan `qtts batch` would make for the bench's rows on this device (batch None:
    auto), by the same function. Raises MemoryPlanError when an explicit batch cannot fit."""
    from qtts.core.synthesis.memory_plan import plan_rows

    dev = torch.device(device)
    tokens = synthetic_tokens(0, config.talker.text_vocab_size, text_len)
    tuning = mode_tuning(mode, dev, model.talker.codec_head.weight.dtype)
    return plan_rows(
        config,
        model,
        decoder,
        budgets=[frames + 1] * rows,
        tokens=[tokens] * rows,
        device=dev,
        tuning=tuning,
        batch_size=batch,
    )


def run_one(
    size,
    config,
    model,
    decoder,
    *,
    plan,
    requests,
    frames,
    device,
    mode,
    write=False,
    text_len=TEXT_LEN,
    vocoder_on=True,
) -> BenchResult:
    from qtts.core.engine.loop.scheduler import EngineRequest
    from qtts.core.synthesis.engine_driver import EngineDriver, EngineShape
    from qtts.core.synthesis.vocoding import Vocoding

    dev = torch.device(device)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    (group,) = plan.groups  # every bench row has the same shape
    batch = group.slots
    res = BenchResult(size, batch, requests, frames, mode, auto=plan.requested is None)
    res.vocoder = vocoder_on
    talker = model.talker
    prompts = [
        embed_prompt(talker, config, synthetic_tokens(i, config.talker.text_vocab_size, text_len))
        for i in range(requests)
    ]
    params = SamplingParams(  # the checkpoints' sampling defaults
        do_sample=True, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05
    )
    tuning = mode_tuning(mode, dev, talker.codec_head.weight.dtype)
    driver = EngineDriver(model, config, dev, tuning)  # a capture that fails raises
    # Graphs are captured here, before the vocoder thread exists (as qtts batch).
    sync(dev)
    built = time.perf_counter()
    engine_pass = driver.build(
        EngineShape.of(group), talker=params, subtalker=params, fixed_length=True
    )
    vocoding = Vocoding(decoder, driver, plan.vocoder_batch)  # as the synthesizer's
    vocoding.plan(plan.vocoder_batch)
    sync(dev)
    built = time.perf_counter() - built
    engine = engine_pass.engine
    engine_requests = [
        EngineRequest(key=i, prompt=p, budget=frames + 1, seed=i) for i, p in enumerate(prompts)
    ]
    timers = {"prefill": 0.0, "vocoder": 0.0, "writing": 0.0}
    measured: list[tuple[np.ndarray, np.ndarray]] = []  # (audio, codes) of the first rows
    lengths: list[int] = []  # frames of each row the vocoder decoded
    finished: list[tuple[float, int]] = []  # (when its audio was done, frames) per group
    prefill = PartClock(dev, ["prefill"])  # the engine's prefill passes, synced at their edges
    engine.timer = prefill
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sync(dev)
    start = time.perf_counter()
    total_frames = 0

    def vocode(done) -> int:  # on the vocoder thread, overlapping the decode loop (as qtts batch)
        if vocoder_on:  # else decode only: the frames made, nothing else on the device
            t = time.perf_counter()
            wavs = vocoding.in_micro_batches([d.codes for d in done], vocoding.decode)
            timers["vocoder"] += time.perf_counter() - t
            lengths.extend(int(d.codes.shape[0]) for d in done)
            room = max(MEASURED_ROWS - len(measured), 0)  # kept to measure after the timed loop
            codes = [d.codes.cpu().numpy() for d in done[:room]]
            measured.extend(zip(wavs[:room], codes, strict=True))
            if write:
                from qtts.core.jobs.output.writer import encode_audio

                t = time.perf_counter()
                for w in wavs:
                    encode_audio(w, SAMPLE_RATE, "wav")
                timers["writing"] += time.perf_counter() - t
        finished.append((time.perf_counter(), sum(int(d.codes.shape[0]) for d in done)))
        return finished[-1][1]

    decoded_at = start  # when the loop handed over its last group
    vocoded_before = 0.0  # the vocoder's and writing's seconds before that (inline: the loop's)

    def handed_over():
        nonlocal decoded_at, vocoded_before
        for group in engine_pass.run(engine_requests):
            decoded_at = time.perf_counter()
            vocoded_before = timers["vocoder"] + timers["writing"]
            yield group

    for frames_done in driver.overlapped(handed_over(), vocode):
        total_frames += frames_done
    sync(dev)
    end = time.perf_counter()
    res.wall_s = end - start
    steps = driver.clock.decode_steps
    res.steps, res.tail_s = steps, round(end - decoded_at, 4)
    engine.timer = None
    timers["prefill"] = prefill.totals["prefill"]
    res.audio_s = total_frames * SAMPLES_PER_FRAME / SAMPLE_RATE
    res.audio_s_per_s = res.audio_s / res.wall_s
    res.frames_per_s = total_frames / res.wall_s
    res.rtf = res.wall_s / max(res.audio_s, 1e-9)
    # The vocoder and writing overlap the decode loop: "decode_loop" is the wall time after prefill.
    timers["decode_loop"] = res.wall_s - timers["prefill"]
    loop_s = decoded_at - start - timers["prefill"]
    if not tuning.vocoder_thread:  # inline (a CPU): the vocoder ran on the loop's thread
        loop_s -= vocoded_before
    res.loop_ms_per_step = round(1e3 * loop_s / max(steps, 1), 3)
    res.phases_s = {k: round(v, 4) for k, v in timers.items()}
    res.groups, res.steady_audio_s_per_s = len(finished), steady_rate(finished)
    res.vocoder_s_per_audio_s = round(timers["vocoder"] / max(res.audio_s, 1e-9), 4)
    res.vocoder_padding = round(padding_waste(lengths), 4)
    clock = driver.clock
    res.time_split = {
        "build_s": round(built, 3),
        "vocoder_graphs": clock.vocoder_graphs,
        "vocoder_graphs_s": round(clock.vocoder_first_met_s, 3),
        "decoding_s": round(decoded_at - start, 3),
        "drain_s": round(end - decoded_at, 3),
    }
    res.measures_s_per_audio_s = round(_measures_cost(measured), 7)
    if cuda:
        res.peak_mem_gb = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    else:  # the process's peak resident set: what the job would need of this machine
        import resource

        res.peak_mem_gb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    res.step_ms, view = profile_step(engine, engine_pass.step, prompts[:batch])
    res.view = view
    return res


def steady_rate(finished: list[tuple[float, int]]) -> float | None:
    """Audio-s/s of the groups after the first, from (time its audio was done, frames) per
    group in hand-over order: their audio over the time since the first group's was done. None
    with fewer than two groups or no time between them."""
    if len(finished) < 2 or finished[-1][0] <= finished[0][0]:
        return None
    audio_s = sum(frames for _, frames in finished[1:]) * SAMPLES_PER_FRAME / SAMPLE_RATE
    return round(audio_s / (finished[-1][0] - finished[0][0]), 2)


def _measures_cost(rows: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Seconds per audio-second the job's model-free measures take, over these rows (audio,
    codes), timed apart from the run: a job computes them on its writer threads."""
    from qtts.core.jobs.output.recorder import measure

    audio_s = sum(len(wav) for wav, _ in rows) / SAMPLE_RATE
    if not rows:  # no audio made (--no-vocoder)
        return 0.0
    t = time.perf_counter()
    for wav, codes in rows:
        measure(wav, codes, BENCH_TEXT, SAMPLE_RATE)
    return (time.perf_counter() - t) / max(audio_s, 1e-9)


def roofline_fraction(res: BenchResult, config, act_bytes: int, spec) -> dict:
    """The step's lower bound on `spec` (bytes / bandwidth, FLOPs / peak) over its measured
    time: the share of the machine's ceiling the engine reaches at this batch."""
    from qtts.core.engine.plan.roofline import decode_step_cost

    cost = decode_step_cost(config, res.batch, res.view, act_bytes)
    bound_ms = cost.lower_bound_s(spec) * 1e3
    step_ms = res.step_ms.get("graph_step", res.step_ms["step"])
    return {
        "device": spec.name,
        "bound_ms": round(bound_ms, 3),
        "step_ms": step_ms,
        "fraction": round(bound_ms / step_ms, 4),
        "ceiling_audio_s_per_s": round(cost.ceiling_audio_s_per_s(res.batch, spec), 2),
    }


def profile_step(engine, step, prompts, repeats: int = 5) -> dict:
    """ms per decode step with every slot active (plain and, if captured, graphed; each the mean
    of `repeats` steps, synced only after the last), and the plain step split into parts that add
    up to it: a further `repeats` steps, instrumented (core/bench/step_parts.py)."""
    from qtts.core.engine.step.slots import SlotFill
    from qtts.core.engine.step.views import view_length

    s = engine.state
    dev = s.c0.device
    engine.prefill(
        [
            SlotFill(slot=slot, prompt=p, budget=s.max_frames, seed=slot)
            for slot, p in enumerate(prompts)
        ]
    )
    longest = max(p.embeds.shape[0] for p in prompts)
    view = view_length(longest + 1, engine.tuning.view_bucket, s.kv.max_len)  # a captured one

    def clock(fn) -> float:
        return ms_per_call(fn, dev, repeats)

    out = {"step": clock(lambda: engine.decode_step(view))}  # no graph: packed or module path
    if step is not None:
        out["graph_step"] = clock(lambda: step(view))
    out = {k: round(v, 3) for k, v in out.items()}
    out["parts"] = step_parts(engine, view, repeats)
    out["repeats"] = repeats
    return out, view
