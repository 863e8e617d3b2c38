"""How fast `qtts score` runs DNSMOS and speaker similarity on this machine, in audio-s/s.

Writes an AudioFolder of CLIPS clips of SECONDS each (24 kHz 16-bit WAV, as qtts writes them:
espeak-ng speech repeated to length when espeak-ng is installed, else pink-ish noise; DNSMOS
costs the same per segment whatever it hears), then times two things: the model alone
(onnxruntime, every core, SEGMENTS_PER_CALL segments a call) and the whole `qtts score` pass
(read, resample to 16 kHz, score, write scores.parquet); then, with --speaker-model (resemblyzer
by default; "none" skips it), a `qtts score` pass of speaker similarity alone on the same clips.
The last stdout line is JSON.

    python tools/dnsmos_bench.py --clips 32 --seconds 8
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

RATE = 24_000


def _source(work: Path) -> np.ndarray:
    """Speech from espeak-ng when there is one, else shaped noise, at RATE."""
    import soxr

    if shutil.which("espeak-ng"):
        wav = work / "espeak.wav"
        text = "Speech quality is measured by a neural network that predicts what people hear."
        subprocess.run(["espeak-ng", "-w", str(wav), text], check=True, capture_output=True)
        audio, rate = sf.read(str(wav), dtype="float32")
        return soxr.resample(audio, rate, RATE)
    noise = np.random.default_rng(0).standard_normal(RATE * 5).astype(np.float32)
    return np.convolve(noise, np.ones(8) / 8, mode="same") * 0.3


def make_folder(root: Path, clips: int, seconds: float) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    source = _source(root)
    n = int(seconds * RATE)
    clip = np.tile(source, int(np.ceil(n / len(source))))[:n]
    with open(root / "metadata.jsonl", "w", encoding="utf-8") as f:
        for k in range(clips):
            sf.write(str(root / f"{k:05d}.wav"), clip, RATE, subtype="PCM_16")
            f.write(json.dumps({"file_name": f"{k:05d}.wav", "text": "bench"}) + "\n")
    return root


def model_rate(clips: int, seconds: float, threads: int) -> dict:
    from qtts.core.quality.dnsmos import Dnsmos

    model = Dnsmos("auto", threads)
    audio = [np.zeros(int(seconds * 16_000), np.float32) + 1e-3] * clips
    model.score(audio[:1])  # warm-up: the session's first call allocates
    t0 = time.perf_counter()
    model.score(audio)
    wall = time.perf_counter() - t0
    segments = clips * len(model.segments(audio[0]))
    return {"provider": model.provider, "segments": segments, "seconds": round(wall, 2),
            "segments_per_s": round(segments / wall, 2),
            "audio_s_per_s": round(clips * seconds / wall, 2)}  # fmt: skip


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each clip")
    parser.add_argument("--speaker-model", default="resemblyzer", help='"none": DNSMOS only')
    args = parser.parse_args()
    from qtts.core.quality.audio import cores
    from qtts.core.quality.score_pass import ScoreOptions, score_path

    with tempfile.TemporaryDirectory() as tmp:
        folder = make_folder(Path(tmp) / "data", args.clips, args.seconds)
        model = model_rate(args.clips, args.seconds, cores())
        summary = score_path(folder, ScoreOptions(device="auto", speaker_model=None))
        speaker = None
        if args.speaker_model != "none":
            only = ScoreOptions(dnsmos=False, speaker_model=args.speaker_model, device="auto")
            speaker = score_path(folder, only)
    result = {"clips": args.clips, "clip_s": args.seconds, "cores": cores(),
              "cpu": _cpu_name(), "model": model,
              "pass": {"seconds": summary["seconds"],
                       "audio_s_per_s": summary["audio_s_per_s"]}}  # fmt: skip
    if speaker is not None:
        result["speaker_pass"] = {"model": args.speaker_model, "seconds": speaker["seconds"],
                                  "audio_s_per_s": speaker["audio_s_per_s"]}  # fmt: skip
    print(
        f"DNSMOS alone: {model['audio_s_per_s']} audio-s/s ({model['segments_per_s']} "
        f"segments/s on {model['provider']}, {cores()} cores); the whole qtts score pass: "
        f"{summary['audio_s_per_s']} audio-s/s"
        + (
            f"; speaker similarity ({args.speaker_model}) alone: {speaker['audio_s_per_s']} "
            "audio-s/s"
            if speaker
            else ""
        )  # fmt: skip
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
