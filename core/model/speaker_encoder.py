"""The Base models' speaker encoder: the log-mel front end and the ECAPA-TDNN that turns it into
an x-vector (docs/model.md, "Speaker encoder (Base)").

Module names mirror the checkpoint's `speaker_encoder.*` tensors, so a strict load needs no
renaming. The Slaney mel filterbank is computed here in numpy (librosa is not a dependency) with
the same float64 arithmetic and float32 rounding as librosa.filters.mel, so the log-mel matches the
official front end. Knows waveforms and tensors; no files, no talker, no prompts.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from qtts.core.model.config import SpeakerEncoderConfig

SAMPLE_RATE = 24000
N_FFT, HOP, N_MELS, FMAX = 1024, 256, 128, 12000.0


# -- Slaney mel scale (librosa's htk=False branch) ----------------------------------------------
_F_SP = 200.0 / 3  # Hz per mel below 1 kHz
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def _hz_to_mel(hz: float) -> float:
    if hz >= _MIN_LOG_HZ:
        return _MIN_LOG_MEL + np.log(hz / _MIN_LOG_HZ) / _LOGSTEP
    return hz / _F_SP


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    hz = _F_SP * mels
    log = mels >= _MIN_LOG_MEL
    hz[log] = _MIN_LOG_HZ * np.exp(_LOGSTEP * (mels[log] - _MIN_LOG_MEL))
    return hz


@lru_cache(maxsize=4)
def slaney_mel_filterbank(
    sr: int = SAMPLE_RATE,
    n_fft: int = N_FFT,
    n_mels: int = N_MELS,
    fmin: float = 0.0,
    fmax: float = FMAX,
) -> np.ndarray:
    """Triangular mel filters with Slaney area normalisation, float32 [n_mels, n_fft // 2 + 1]."""
    fft_hz = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)  # [F]
    mel_hz = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))  # [M + 2]
    fdiff = np.diff(mel_hz)
    ramps = np.subtract.outer(mel_hz, fft_hz)  # [M + 2, F]
    weights = np.zeros((n_mels, n_fft // 2 + 1), dtype=np.float32)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_hz[2 : n_mels + 2] - mel_hz[:n_mels]))[:, None]  # float64 math, f32 out
    weights.flags.writeable = False
    return weights


def log_mel(wav: torch.Tensor) -> torch.Tensor:
    """24 kHz float32 waveform [S] -> natural-log mel spectrogram [frames, 128] (official front end:
    reflect pad 384 per side, STFT 1024/256 periodic Hann, centre off, magnitude with 1e-9 inside
    the root, mel, ln(max(x, 1e-5)))."""
    basis = torch.tensor(slaney_mel_filterbank(), device=wav.device)  # [M, F]
    pad = (N_FFT - HOP) // 2
    y = F.pad(wav[None, None], (pad, pad), mode="reflect")[0]  # [1, S + 2 * pad]
    window = torch.hann_window(N_FFT, device=wav.device)
    spec = torch.stft(
        y, N_FFT, hop_length=HOP, win_length=N_FFT, window=window, center=False,
        normalized=False, onesided=True, return_complex=True,
    )  # fmt: skip  # [1, F, frames]
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)  # [1, F, frames]
    mel = torch.matmul(basis, mag)  # [1, M, frames]
    return torch.log(torch.clamp(mel, min=1e-5))[0].transpose(0, 1)  # [frames, M]


# -- ECAPA-TDNN (no BatchNorm; 'same' reflect padding everywhere) --------------------------------
def _conv(cin: int, cout: int, kernel: int = 1, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TimeDelayNetBlock(nn.Module):
    """Conv1d + ReLU."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int):
        super().__init__()
        self.conv = _conv(cin, cout, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    """Split channels into `scale` groups; group i > 0 convolves itself plus group i-1's output."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int):
        super().__init__()
        if channels % scale:
            raise ValueError(f"speaker encoder: {channels} channels do not split into {scale}")
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(
            TimeDelayNetBlock(width, width, kernel, dilation) for _ in range(scale - 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.chunk(x, self.scale, dim=1)
        out = [parts[0]]
        for i in range(1, self.scale):
            y = parts[i] if i == 1 else parts[i] + out[-1]
            out.append(self.blocks[i - 1](y))
        return torch.cat(out, dim=1)


class SqueezeExcitationBlock(nn.Module):
    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = _conv(channels, se_channels)
        self.conv2 = _conv(se_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean(dim=2, keepdim=True)  # [B, C, 1]
        return x * torch.sigmoid(self.conv2(F.relu(self.conv1(s))))


class SqueezeExcitationRes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, scale: int, se_channels: int, kernel: int, dil: int):
        super().__init__()
        self.tdnn1 = TimeDelayNetBlock(cin, cout, 1, 1)
        self.res2net_block = Res2NetBlock(cout, scale, kernel, dil)
        self.tdnn2 = TimeDelayNetBlock(cout, cout, 1, 1)
        self.se_block = SqueezeExcitationBlock(cout, se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tdnn2(self.res2net_block(self.tdnn1(x)))
        return self.se_block(h) + x


class AttentiveStatisticsPooling(nn.Module):
    """Attention-weighted mean and std over time, conditioned on the global mean and std."""

    EPS = 1e-12

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TimeDelayNetBlock(channels * 3, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels)

    @classmethod
    def _stats(cls, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = (w * x).sum(2)  # [B, C]
        std = torch.sqrt((w * (x - mean[..., None]).pow(2)).sum(2).clamp(cls.EPS))
        return mean, std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[-1]
        # Uniform weights 1/T, written as the official masked form (mask / mask.sum) for parity.
        uniform = torch.ones(x.shape[0], 1, t, dtype=x.dtype, device=x.device)  # [B, 1, T]
        uniform = uniform / uniform.sum(dim=2, keepdim=True)
        mean, std = self._stats(x, uniform)
        context = torch.cat(
            [x, mean[..., None].repeat(1, 1, t), std[..., None].repeat(1, 1, t)], dim=1
        )  # [B, 3C, T]
        attn = F.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)  # [B, C, T]
        mean, std = self._stats(x, attn)
        return torch.cat((mean, std), dim=1)[..., None]  # [B, 2C, 1]


class SpeakerEncoder(nn.Module):
    """log-mel [B, frames, mel_dim] -> x-vector [B, enc_dim]."""

    def __init__(self, cfg: SpeakerEncoderConfig):
        super().__init__()
        ch, ks, dil = cfg.enc_channels, cfg.enc_kernel_sizes, cfg.enc_dilations
        if not len(ch) == len(ks) == len(dil):
            raise ValueError("speaker encoder: channel, kernel and dilation lists differ in length")
        blocks: list[nn.Module] = [TimeDelayNetBlock(cfg.mel_dim, ch[0], ks[0], dil[0])]
        for i in range(1, len(ch) - 1):
            blocks.append(
                SqueezeExcitationRes2NetBlock(
                    ch[i - 1],
                    ch[i],
                    scale=cfg.enc_res2net_scale,
                    se_channels=cfg.enc_se_channels,
                    kernel=ks[i],
                    dil=dil[i],
                )
            )
        self.blocks = nn.ModuleList(blocks)
        self.mfa = TimeDelayNetBlock(ch[-1], ch[-1], ks[-1], dil[-1])
        self.asp = AttentiveStatisticsPooling(ch[-1], cfg.enc_attention_channels)
        self.fc = _conv(ch[-1] * 2, cfg.enc_dim)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        h = mels.transpose(1, 2)  # [B, mel_dim, T]
        outs = []
        for block in self.blocks:
            h = block(h)
            outs.append(h)
        h = self.mfa(torch.cat(outs[1:], dim=1))  # multi-layer feature aggregation
        return self.fc(self.asp(h)).squeeze(-1)  # [B, enc_dim]


@torch.inference_mode()
def x_vector(encoder: SpeakerEncoder, wav: np.ndarray) -> torch.Tensor:
    """24 kHz mono float32 waveform -> x-vector [enc_dim] on the encoder's device and dtype."""
    p = next(encoder.parameters())
    mel = log_mel(torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32)))  # [T, M]
    return encoder(mel[None].to(device=p.device, dtype=p.dtype))[0]
