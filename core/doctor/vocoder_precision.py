"""The speech decoder in bf16 against fp32 on the same codes: the audio's signal-to-noise ratio.

Teacher forcing ties the talker and predictor to fp32 token by token; the vocoder has no tokens,
so its tie is the audio itself. Lively random weights (the checkpoint maker's draw, output
calibrated to speech level) at the run's dimensions decode the same random codes twice.
"""

from __future__ import annotations

import copy

import torch

from qtts.core.doctor.runner import Check, DoctorRun, bf16_not_here, skipped, verdict
from qtts.core.engine.device.tuning import EngineTuning
from qtts.core.engine.vocoder.decoder_kernels import with_kernels
from qtts.core.engine.vocoder.vocoder_windows import decode_bucketed
from qtts.core.model.codec import SpeechDecoder
from qtts.core.model.sizes import decoder_config

# bf16 rounds each of the decoder's ~40 convolutions and its transformer to 8 significant bits:
# random weights give 25-26 dB at the tiny and the published dimensions (white noise of that
# level under speech). A cast in the wrong place (audio through bf16 at the output, a lost
# fp32 norm) falls to single digits; 20 dB leaves room for other weights.
BF16_AUDIO_MIN_SNR_DB = 20.0
ROW_FRAMES = (40, 33)  # two rows of different lengths: one window each, two buckets


def audio_snr_db(reference: torch.Tensor, test: torch.Tensor) -> float:
    """10 log10(|reference|^2 / |reference - test|^2) over every sample (fp32)."""
    reference, test = reference.float(), test.float()
    noise = (reference - test).pow(2).sum().clamp_min(1e-30)
    return float(10 * torch.log10(reference.pow(2).sum() / noise))


def lively_decoder(size: str, device: torch.device, seed: int = 0) -> SpeechDecoder:
    """The decoder at `size` with the checkpoint maker's weights (not near-silent noise)."""
    from qtts.core.tiny.checkpoint import calibrate_output, draw_decoder

    decoder = SpeechDecoder(decoder_config(size)).eval()
    gen = torch.Generator().manual_seed(seed)
    decoder.load_state_dict(draw_decoder(decoder, gen))
    calibrate_output(decoder, gen)
    return decoder.to(device)


def bf16_vocoder(run: DoctorRun) -> Check:
    name = "bf16 vocoder tracks fp32 (audio SNR)"
    why_not = bf16_not_here(run)
    if why_not:
        return skipped(name, why_not)
    fp32 = lively_decoder(run.size, run.device)
    gen = torch.Generator().manual_seed(1)
    q, book = fp32.cfg.num_quantizers, fp32.cfg.codebook_size
    codes = [torch.randint(0, book, (n, q), generator=gen).to(run.device) for n in ROW_FRAMES]
    with torch.inference_mode():
        reference = torch.cat(decode_bucketed(fp32, codes))
        gemm = EngineTuning.for_device(run.device).decoder_gemm
        bf16 = with_kernels(copy.deepcopy(fp32).to(torch.bfloat16), gemm=gemm)  # a job's path
        audio = torch.cat(decode_bucketed(bf16, codes))
    snr = audio_snr_db(reference, audio)
    figures = {
        "size": run.size,
        "rows": list(ROW_FRAMES),
        "snr_db": round(snr, 2),
        "min_snr_db": BF16_AUDIO_MIN_SNR_DB,
    }
    detail = (
        f"{run.size} decoder, {len(codes)} rows: bf16 audio {snr:.1f} dB SNR against "
        f"fp32 (>= {BF16_AUDIO_MIN_SNR_DB:g} dB)"
    )
    return verdict(name, snr >= BF16_AUDIO_MIN_SNR_DB, detail, figures)
