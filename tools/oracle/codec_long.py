"""codec_long.npz: the official speech-tokenizer decode on long random codes.

Owns: drawing three utterances (700, 350, 40 frames) of random codes, decoding them in ONE
official `Qwen3TTSTokenizer.decode` call (so 300-frame chunking with 25 frames of left context
and batch padding are exercised), and storing a compact view of the outputs:

    codes_{i}      int64 [T_i, 16]       the codes of utterance i
    num_samples    int64 [3]             length of each decoded utterance (T_i * 1920)
    stride         int64 scalar          subsampling stride of sub_{i}
    sub_{i}        float32 [ceil(n_i/stride)]   audio_i[::stride]
    windows        int64 [W, 3]          rows (utterance, start_frame, end_frame)
    win_{j}        float32 [(end-start)*1920]   audio_u[start*1920 : end*1920] for windows[j]

Must not know: talker checkpoints or cases.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FRAMES = (700, 350, 40)
STRIDE = 97
SEED = 4242
# Chunk boundaries sit at frames 300 and 600; each window straddles one (context 275..300).
WINDOWS = ((0, 290, 335), (0, 590, 635), (1, 290, 335), (2, 30, 40))
SAMPLES_PER_FRAME = 1920


def write_codec_long(golden: Path) -> Path:
    import torch
    from qwen_tts import Qwen3TTSTokenizer

    tok = Qwen3TTSTokenizer.from_pretrained(str(golden / "speech_tokenizer"), dtype=torch.float32)
    gen = torch.Generator().manual_seed(SEED)
    codes = [torch.randint(0, 2048, (t, 16), generator=gen, dtype=torch.long) for t in FRAMES]
    wavs, sr = tok.decode([{"audio_codes": c} for c in codes])
    if sr != 24000:
        raise ValueError(f"speech tokenizer returned sample rate {sr}, expected 24000")
    arrays: dict[str, np.ndarray] = {}
    for i, (c, w) in enumerate(zip(codes, wavs, strict=True)):
        if w.shape[0] != FRAMES[i] * SAMPLES_PER_FRAME:
            raise ValueError(f"utterance {i}: {w.shape[0]} samples for {FRAMES[i]} frames")
        arrays[f"codes_{i}"] = c.numpy().astype(np.int64)
        arrays[f"sub_{i}"] = np.ascontiguousarray(w[::STRIDE]).astype(np.float32)
    arrays["num_samples"] = np.array([w.shape[0] for w in wavs], dtype=np.int64)
    arrays["stride"] = np.array(STRIDE, dtype=np.int64)
    arrays["windows"] = np.array(WINDOWS, dtype=np.int64)
    for j, (u, start, end) in enumerate(WINDOWS):
        seg = wavs[u][start * SAMPLES_PER_FRAME : end * SAMPLES_PER_FRAME]
        arrays[f"win_{j}"] = np.ascontiguousarray(seg).astype(np.float32)
    out = golden / "codec_long.npz"
    np.savez_compressed(out, **arrays)
    return out
