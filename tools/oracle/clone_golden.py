"""The `base` stage of make_golden.py: a tiny Base (voice clone) checkpoint and its golden cases.

Owns: the Base checkpoint config (a tiny ECAPA-TDNN speaker encoder; talker as cv17), the weight
draw (the same recipe as checkpoints.build_model), writing the reference clips and their official
front-end outputs (mel filterbank, log-mel, x-vector, Mimi codes), aiming EOS, running the cases.

Files (tests/fixtures/golden/): base/ (checkpoint), base_refs/{ref_a,ref_b}.wav + refs.npz,
base_cases/<case>.npz (codes_i, audio_i), base_cases.json.

Must not know: qtts (never imported).
"""

from __future__ import annotations

import checkpoints as K
import clone_cases as CC
import eos_aim as E
import numpy as np
import torch
from oracle_env import GOLDEN, redraw_, round_through_, write_json

MIN_MARGIN = 0.05
SPEC = K.Spec("base", "base", "1b7", 16, 8, "bfloat16", 1703)
SPEAKER_ENCODER = {
    "mel_dim": 128,
    "enc_dim": 16,  # = talker hidden: the x-vector sits in the codec stream
    "enc_channels": [16, 16, 16, 16, 48],
    "enc_kernel_sizes": [5, 3, 3, 3, 1],
    "enc_dilations": [1, 2, 3, 4, 1],
    "enc_attention_channels": 8,
    "enc_res2net_scale": 4,
    "enc_se_channels": 8,
    "sample_rate": 24000,
}


def build_model():
    """Official model with the cv17 draw recipe, rounded through bfloat16."""
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

    tok_ids, assistant_id = K.tokenizer_ids()
    cfg_dict = K.model_config(SPEC, tok_ids, assistant_id)
    cfg_dict["speaker_encoder_config"] = dict(SPEAKER_ENCODER)
    cfg = Qwen3TTSConfig(**{k: v for k, v in cfg_dict.items() if k != "model_type"})
    model = Qwen3TTSForConditionalGeneration(cfg).eval()
    redraw_(model, SPEC.seed)
    K.widen_paths_(model)
    with torch.no_grad():
        # The x-vector takes a codec slot: give it codec-embedding scale so it matters.
        model.speaker_encoder.fc.weight.mul_(5.0)
    round_through_(model, getattr(torch, SPEC.storage_dtype))
    return model, cfg_dict


def load_official():
    from qwen_tts import Qwen3TTSModel

    return Qwen3TTSModel.from_pretrained(str(GOLDEN / "base"), dtype=torch.float32)


def write_front_end(tts, refs: dict) -> None:
    """Official mel filterbank, log-mel, x-vector and Mimi codes per reference clip."""
    import soundfile as sf
    from librosa.filters import mel as librosa_mel_fn
    from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram

    arrays = {"mel_basis": librosa_mel_fn(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000)}
    for name, path in refs.items():
        wav, sr = sf.read(str(path), dtype="float32")
        mel = mel_spectrogram(
            torch.from_numpy(wav)[None], 1024, 128, 24000, 256, 1024, 0, 12000
        ).transpose(1, 2)
        arrays[f"mel_{name}"] = mel[0].numpy()
        arrays[f"xvector_{name}"] = tts.model.extract_speaker_embedding(wav, 24000).numpy()
        enc = tts.model.speech_tokenizer.encode(str(path))
        arrays[f"codes_{name}"] = enc.audio_codes[0].long().numpy()
    np.savez_compressed(GOLDEN / "base_refs" / "refs.npz", **arrays)


def trajectories(tts, refs) -> dict:
    rec = E.StepRecorder(tts.model.talker.codec_head)
    out = {}
    try:
        for name, row in CC.ROWS.items():
            rec.clear()
            got = CC.run_rows(tts, [row], refs, CC.MAX_NEW_TOKENS)
            traj = E.replay(rec.hidden, rec.logits)
            if traj.tokens[: got["codes"][0].shape[0]] != got["codes"][0][:, 0].tolist():
                raise ValueError(f"base/{name}: greedy replay differs from official c0")
            out[name] = traj
    finally:
        rec.remove()
    return out


def run_cases(tts, refs, plan) -> None:
    (GOLDEN / "base_cases").mkdir(parents=True, exist_ok=True)
    entries = []
    n = CC.MAX_NEW_TOKENS
    for case in CC.CASES:
        rows = [CC.ROWS[r] for r in case.rows]
        got = CC.run_rows(tts, rows, refs, n)
        frames = [int(c.shape[0]) for c in got["codes"]]
        want = [n - 1 if plan.get(r) is None else plan[r] for r in case.rows]
        if frames != want:
            raise ValueError(f"{case.name}: frames {frames}, planned {want}")
        arrays = {}
        for i, (codes, audio) in enumerate(zip(got["codes"], got["audio"], strict=True)):
            arrays[f"codes_{i}"] = codes.astype(np.int64)
            arrays[f"audio_{i}"] = audio.astype(np.float32)
            if got["ref_code"][i] is not None:
                arrays[f"ref_code_{i}"] = got["ref_code"][i].astype(np.int64)
            arrays[f"xvector_{i}"] = got["xvector"][i]
        np.savez_compressed(GOLDEN / "base_cases" / f"{case.name}.npz", **arrays)
        entries.append(_entry(case, rows, got, frames, n))
        print(f"[base] {case.name}: frames {frames}, audio {[a.shape[0] for a in got['audio']]}")
    write_json(GOLDEN / "base_cases.json", entries)


def _entry(case, rows, got, frames, n) -> dict:
    return {
        "name": case.name,
        "checkpoint": "base",
        "call": "voice_clone",
        "max_new_tokens": n,
        "rows": [
            {
                "text": r.text,
                "language": r.language,
                "ref_audio": f"base_refs/{r.ref}.wav",
                "ref_text": r.ref_text,
                "x_vector_only": r.x_vector_only,
            }
            for r in rows
        ],
        "row_keys": list(case.rows),
        "input_ids": got["input_ids"],
        "ref_ids": got["ref_ids"],
        "num_frames": frames,
        "num_samples": [int(a.shape[0]) for a in got["audio"]],
    }


def build_base() -> None:
    refs = CC.write_references(GOLDEN / "base_refs")
    model, cfg = build_model()
    ckpt = GOLDEN / "base"
    K.write_checkpoint(SPEC, model, cfg, ckpt)
    tts = load_official()
    trajs = trajectories(tts, refs)
    plan = {r: CC.STOP_PLAN.get(r) for r in CC.ROWS}
    w, margin = E.solve_eos_row(trajs, plan)
    K.set_eos_row(model, w, SPEC.storage_dtype)
    stored = model.talker.codec_head.weight[K.CODEC_EOS].detach().double().numpy()
    kept = E.margins(trajs, plan, stored)
    print(f"[base] EOS LP margin {margin:.4f}, after {SPEC.storage_dtype} rounding {kept:.4f}")
    if kept < MIN_MARGIN:
        raise ValueError(f"base: EOS margin {kept:.4f} too small; change STOP_PLAN or seed")
    K.write_checkpoint(SPEC, model, cfg, ckpt)
    tts = load_official()
    write_front_end(tts, refs)
    run_cases(tts, refs, plan)
