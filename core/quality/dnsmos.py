"""DNSMOS P.835 (Microsoft's non-intrusive speech quality model): `dnsmos_sig`, `dnsmos_bak`,
`dnsmos_ovrl` of each clip, 1 (bad) to 5 (excellent).

The model files and the per-segment calibration are speechmos's (the published ONNX models,
shipped in its wheel: nothing is downloaded). speechmos scores one 9.01 s segment per call; this
module scores the same segments the same way (a clip shorter than a segment is repeated to fill
one; a longer one is cut into segments a second apart; each segment's scores are calibrated, then
averaged per clip) but many segments per call, from many clips, in one onnxruntime session that
uses every core, or the GPU where onnxruntime has CUDA (the onnxruntime-gpu package). speechmos's
P.808 score, which needs a mel spectrogram per segment, is not computed.
Knows the model and samples; no files, no tables.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import numpy as np

from qtts.core.quality.audio import SAMPLE_RATE

COLUMNS = ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl")
DONE = "dnsmos_ovrl"  # a row has a DNSMOS score when this is set
SEGMENTS_PER_CALL = 32  # 32 x 9.01 s of float32: 18 MB per call, enough to keep every core busy


def identity() -> str:
    """What makes two DNSMOS scores comparable: the model and calibration speechmos ships."""
    return f"dnsmos-p835:speechmos-{version('speechmos')}"


class Dnsmos:
    def __init__(self, device: str, threads: int) -> None:
        import onnxruntime as ort
        from speechmos import dnsmos as reference

        self._reference = reference
        model = Path(reference.__file__).parent / "dnsmos_models" / "sig_bak_ovr.onnx"
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        providers: list = ["CPUExecutionProvider"]
        if device != "cpu" and "CUDAExecutionProvider" in ort.get_available_providers():
            index = int(device.partition(":")[2] or 0)  # cuda:N -> GPU N
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": index}))
        self.session = ort.InferenceSession(str(model), options, providers=providers)
        self.input = self.session.get_inputs()[0].name
        self.segment = int(reference.INPUT_LENGTH * SAMPLE_RATE)
        # speechmos's calibration (a cubic per dimension) is an instance method using no state.
        self._calibrate = object.__new__(reference.DNSMOS).get_polyfit_val

    @property
    def provider(self) -> str:
        return self.session.get_providers()[0]

    def segments(self, audio: np.ndarray) -> np.ndarray:
        """[segments, samples]: the windows speechmos scores for this clip, in its order (a
        copy; scoring takes them a batch at a time from _windows)."""
        view, starts = self._windows(audio)
        return view[starts]

    def _windows(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The clip's sliding-window view [positions, samples] (no copy) and the start of each
        window speechmos scores. As there, a window's end is computed in floating point and a
        window that comes out one sample short is skipped (windows 7 to 23 among others): kept,
        so that the scores equal speechmos's and every published DNSMOS figure made with the
        same code."""
        if len(audio) == 0:
            raise ValueError("the clip holds no samples")
        while len(audio) < self.segment:
            audio = np.append(audio, audio)
        length = self._reference.INPUT_LENGTH
        hops = np.arange(int(np.floor(len(audio) / SAMPLE_RATE) - length) + 1)
        starts = (hops * SAMPLE_RATE).astype(np.int64)
        ends = np.minimum(((hops + length) * SAMPLE_RATE).astype(np.int64), len(audio))
        view = np.lib.stride_tricks.sliding_window_view(audio, self.segment)
        return view, starts[ends - starts >= self.segment]

    def score(self, clips: list[np.ndarray]) -> np.ndarray:
        """[clips, 3]: sig, bak, ovrl of each clip (16 kHz mono float32). Windows are copied a
        call's worth at a time: a long clip's hundreds of windows never sit in memory at once."""
        windows = [self._windows(a) for a in clips]
        owner = np.repeat(np.arange(len(clips)), [len(starts) for _, starts in windows])
        flat = [(view, start) for view, starts in windows for start in starts]
        raw = np.empty((len(flat), 3), dtype=np.float64)
        for at in range(0, len(flat), SEGMENTS_PER_CALL):
            part = flat[at : at + SEGMENTS_PER_CALL]
            batch = np.stack([view[start] for view, start in part]).astype(np.float32)
            raw[at : at + len(batch)] = self.session.run(None, {self.input: batch})[0]
        sig, bak, ovr = self._calibrate(raw[:, 0], raw[:, 1], raw[:, 2], False)
        calibrated = np.stack([sig, bak, ovr], axis=1)
        sums = np.zeros((len(clips), 3))
        np.add.at(sums, owner, calibrated)
        return sums / np.bincount(owner, minlength=len(clips))[:, None]
